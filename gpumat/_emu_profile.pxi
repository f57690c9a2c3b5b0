# The emulated CUDA device's profiler counters (extensions/src/emu/profile.cpp), for gpumat.profile.

cdef extern from *:
    """
    #include <string>
    #include <utility>
    #include <vector>
    namespace gpumat::emulator {
    void profile_enable(bool on);
    bool profile_enabled();
    std::vector<std::string> profile_fields();
    int profile_summed_count();
    std::vector<std::pair<std::string, std::vector<double>>> profile_take();
    }
    """
    void emu_profile_enable "gpumat::emulator::profile_enable"(bool on) nogil
    bint emu_profile_enabled "gpumat::emulator::profile_enabled"() nogil
    vector[string] emu_profile_fields "gpumat::emulator::profile_fields"() nogil
    int emu_profile_summed_count "gpumat::emulator::profile_summed_count"() nogil
    vector[pair[string, vector[double]]] emu_profile_take "gpumat::emulator::profile_take"() nogil


def _emu_profile_enable(bint on):
    """Turns the emulated device's launch counters on or off (gpumat.profile's switch). Launches
    that run while it is on are recorded; queued launches count when they run, so synchronize the
    emulated devices around the switch."""
    emu_profile_enable(on)


def _emu_profile_enabled():
    """True while the emulated device records launch counters."""
    return emu_profile_enabled()


def _emu_profile_summed_fields():
    """The counters a launch sums over its accesses (and a kernel over its launches), in
    extensions/src/emu/profile.cpp's order: the first of its fields."""
    cdef vector[string] names = emu_profile_fields()
    keys = [n.decode() for n in names]
    return tuple(keys[: emu_profile_summed_count()])


def _emu_profile_take():
    """The launches recorded since the last call (cleared): a list of (kernel name, dict of
    counters), the counters' meaning in extensions/src/emu/profile.cpp."""
    cdef vector[string] names = emu_profile_fields()
    cdef vector[pair[string, vector[double]]] records
    with nogil:
        records = emu_profile_take()
    keys = [n.decode() for n in names]
    return [(r.first.decode(), dict(zip(keys, r.second))) for r in records]
