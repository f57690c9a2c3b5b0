# The emulated CUDA device's self-test (extensions/src/emu/selftest.cu): deliberately wrong kernels,
# one per kind of bug the emulator's memcheck, racecheck and initcheck report, beside correct twins.
# For tests/kernels/test_emulator_checks.py only: not part of gpumat's API.

cdef extern from *:
    """
    #include <string>
    #include <vector>
    namespace gpumat::emu {
    std::vector<float> selftest(const std::string& name, int dev);
    }
    """
    vector[float] emu_selftest "gpumat::emu::selftest"(const string& name, int dev) except +gpumat_raise_py_error nogil


def _emu_selftest(str name, int index=0):
    """Runs the emulated device's self-test ``name`` on ``gpumat.emu(index)``.

    Returns the values its kernel computed, copied back (a list of floats). Raises
    gpumat.CudaError with the emulator's report for the fault a wrong kernel plants, ValueError for
    an unknown name.
    """
    cdef string n = name.encode()
    cdef vector[float] out
    with nogil:
        out = emu_selftest(n, index)
    return list(out)
