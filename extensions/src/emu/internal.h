// The CUDA emulator's internals, shared by its three parts (nothing outside src/emu includes this):
//   emulator.cpp      the engine: fibers, the block scheduler, barriers, warp collectives, cp.async
//   cuda_runtime.cpp  the runtime API of cuda_runtime.h: device memory, streams and their worker
//                     threads, events, graphs, errors
//   checks.cpp        memcheck, racecheck and initcheck: the hooks that instrumented kernels call
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_runtime.h"

namespace gpumat::emulator::detail {

// ============================================================================ configuration

// The value of environment variable `name` as an integer (decimal or 0x hex), or `fallback`.
uint64_t env_u64(const char* name, uint64_t fallback);

// A fiber stack slot (see SlotHeader in cuda_runtime.h): a guard page, then the stack. The slots all
// lie in one reserved address range (gpumat_emu_slots), so an access hook tells from its stack
// pointer whether it runs in a kernel.
size_t page_size();
inline size_t stack_bytes() { return kSlotBytes - page_size(); }
inline bool on_slot(uintptr_t sp) { return sp - gpumat_emu_slots.lo < gpumat_emu_slots.size; }
inline SlotHeader* slot_header(uintptr_t sp) {
  return gpumat_emu_slots.headers + ((sp - gpumat_emu_slots.lo) >> kSlotShift);
}

// ============================================================================ errors

// Sets the calling host thread's last error (returned by cudaGetLastError, detailed by
// cudaGetErrorString) and returns err.
cudaError_t fail(cudaError_t err, std::string detail);

// ============================================================================ device memory

// One cudaMalloc'd block. Its bytes past `live` are off limits to kernels: the rounding slack of
// the host allocation, and everything past what gpumat's caching allocator handed out of it (a
// cached block has live == 0). Shadow state of the checks lives here too.
struct Segment {
  uintptr_t base = 0;
  size_t bytes = 0;     // what cudaMalloc was asked for
  size_t capacity = 0;  // what the host allocation holds (bytes rounded up)
  int dev = 0;
  std::atomic<size_t> live{0};           // in use by kernels: [base, base + live)
  std::atomic<bool> cached{false};       // in gpumat's allocator cache (freed by its last user)
  std::unique_ptr<uint8_t[]> init;       // initcheck: per 4-byte word, the bytes written (low 4 bits)
  std::atomic<uint64_t*> race{nullptr};  // racecheck: per 4-byte word, the last plain write's launch
                                         // and thread (allocated at the first plain kernel write)
  std::atomic<uint32_t> race_failed{0};  // the launch (launch_seq) that found no memory for `race`
  ~Segment() { delete[] race.load(); }
  Segment() = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
};

// The segment whose host allocation holds address p, or nullptr (takes the registry's read lock).
Segment* segment_at(uintptr_t p);
// Racecheck's shadow of s has been made: cudaMalloc charged its host memory in advance.
void race_shadow_made(const Segment* s);
// Says where p lies relative to the device's allocations, for reports ("12 bytes past the end of
// the 40-byte allocation at 0x...").
std::string describe_device_address(uintptr_t p, size_t n);

// Initcheck shadow of [p, p + n) inside segment s: marks the bytes written (copies and memsets),
// or copies the state of another range (device-to-device copies).
void mark_initialised(Segment* s, uintptr_t p, size_t n);
void copy_initialised(Segment* dst_seg, uintptr_t dst, Segment* src_seg, uintptr_t src, size_t n);

// ============================================================================ the checks' view of a kernel

// What an instrumented access does (the hooks' `kind` bits).
enum Kind : unsigned { kRead = 1, kWrite = 2, kAtomic = 4, kUnaligned = 8 };

// The bits of GPUMAT_EMU_CHECKS (default: all): which hazards end a launch with a report.
enum CheckBits : unsigned { kMemcheck = 1, kRacecheck = 2, kInitcheck = 4 };
// GPUMAT_EMU_CHECKS, read at every launch (on the launching thread): false, with the reason in
// *error, for a value that is not all, none or a comma list of memcheck, racecheck, initcheck.
bool enabled_checks(unsigned* bits, std::string* error);
// GPUMAT_EMU_CHECK_REPEATS (default 3; 0 for "all": every launch checked), read at every launch.
uint32_t check_repeats();

// Counts the changes to the device's allocations (cudaMalloc, cudaFree, a block of gpumat's caching
// allocator handed out or returned), in the order the streams run them: a launch that repeats an
// earlier one in the same epoch reaches the same live allocations through its pointers.
uint64_t memory_epoch();

// One 4-byte word of shared memory, as racecheck and initcheck see it. Barrier intervals are
// numbered per worker, increasing across blocks, so an entry from an earlier block is recognised by
// its intervals (before the block's first) and needs no reset. 16 bytes: what the access hooks'
// fast path reads; the warp-sync epochs, needed only around warp collectives, are in WordEpochs.
struct SharedWord {
  uint32_t write_interval = 0;  // of the last write (any kind): the bytes in `init` are this block's
  uint32_t read_interval = 0;   // of the reads noted in reader, read_warp
  uint16_t writer = 0;          // thread + 1 of the last plain write (0: none)
  uint16_t reader = 0;          // thread + 1 of the reads in read_interval, or kManyReaders
  uint16_t read_warp = 0;       // the readers' warp, or kManyWarps
  uint8_t init = 0;             // the bytes written in this block (low 4 bits)
};
struct WordEpochs {
  uint32_t write = 0, read = 0;  // the writer's warp-sync epoch; the readers' latest
};
constexpr uint16_t kManyReaders = 0xFFFF, kManyWarps = 0xFFFF;

// A range of shared memory with its shadow: the block's dynamic shared memory, or the thread-local
// storage block of a module with instrumented kernels (where static __shared__ variables live).
struct SharedRegion {
  uintptr_t lo = 0, size = 0;
  std::vector<SharedWord> shadow;  // one per 4-byte word
  std::vector<WordEpochs> epochs;
  // Per word, the barrier interval in which a read has nothing to check or note: the word was
  // written in an earlier interval of the block and has been read by several threads in this one
  // (the state of a matmul tile after its barrier); `warp`: by threads of several warps (kManyWarps:
  // any thread may read), or of this one warp (its threads may, before any warp collective). A
  // small array beside the shadow, for the access hooks' commonest case; a write clears it.
  struct ReadOk {
    uint32_t interval = 0, warp = 0;
  };
  std::vector<ReadOk> read_ok;
  void resize(size_t words) {
    shadow.resize(words);
    epochs.resize(words);
    read_ok.resize(words);
  }
};

// What the access hooks need to know about the emulated thread running on this OS thread. The
// engine keeps one per worker thread; the header of each of the worker's stack slots points to it.
struct BlockProfile;  // profile.cpp: the running block's counters while profiling

struct Active {
  // The profiler's state for the running block, or nullptr when the launch is not profiled (the
  // access hooks test only this).
  BlockProfile* profile = nullptr;
  // True while the emulator's own code runs on a fiber (barriers, reports): library functions
  // it shares with the instrumented kernels (the linker keeps one copy of an inline function) then
  // call the hooks, which must ignore them.
  bool quiet = true;
  // the running emulated thread
  uintptr_t slot = 0;   // its stack slot [slot, slot + kSlotBytes)
  uint32_t thread = 0;  // linear index in its block
  uint32_t warp_epoch = 0;
  // the block
  const char* kernel = "";
  uint32_t launch_seq = 0;      // a serial number of the launch (racecheck's plain-write shadow)
  uint32_t first_interval = 0;  // the block's first barrier interval (per worker, see SharedWord)
  uint32_t interval = 0;        // the current one: advanced at each block barrier
  uint64_t block_linear = 0;
  unsigned checks = 0;
  uintptr_t params_lo = 0, params_size = 0;  // the launch's argument block
  SharedRegion dynamic_smem;                 // lo/size set per block
  std::vector<SharedRegion> tls;             // each module's thread-local block, set per worker
  uintptr_t tls0_lo = 0, tls0_size = 0;      // tls[0] (the emulator's module) for the fast path
  SharedWord* tls0_shadow = nullptr;
  WordEpochs* tls0_epochs = nullptr;
  SharedRegion::ReadOk* tls0_read_ok = nullptr;
  // the global segments accessed last, most recent first (reset at each block start)
  struct CachedSegment {
    uintptr_t base = 0, live = 0;
    uint8_t* init = nullptr;
    uint64_t* race = nullptr;
    Segment* seg = nullptr;
  };
  static constexpr int kCachedSegments = 4;
  CachedSegment seg[kCachedSegments];
};

// Called by the engine when a worker thread runs its first block (finds the thread-local storage of
// the modules whose kernels are instrumented) and at every block start.
void prepare_worker(Active& a);
void prepare_block(Active& a, size_t dynamic_smem_bytes, uintptr_t dynamic_smem);
void reset_shared_shadows(Active& a);  // before the worker's interval numbers wrap

// True when instrumented code has been loaded (its constructors call __tsan_init): then the checks
// run; without (the ASan build of `make emu-sanitize`) they cannot.
bool instrumented();

// Checks an access the emulator itself makes on a thread's behalf (cp.async).
void check_access(const void* p, size_t n, bool write);

// ---------------------------------------------------------------------------- engine services
// Implemented in emulator.cpp for checks.cpp.

// "kernel K, block (x, y, z), thread (x, y, z)" of the running thread.
std::string where_running();
// "thread (x, y, z)" of thread `linear` of the running block; "block (x, y, z)" of block `linear`.
std::string thread_coords(uint32_t linear);
std::string block_coords(uint64_t linear);
// Reports a fault in the running thread and abandons its block (the launch fails). `out_of_memory`:
// the fault is host memory the checks could not get, and the launch fails with
// cudaErrorMemoryAllocation (a MemoryError in Python) rather than as a bug of the kernel.
[[noreturn]] void fault_running_thread(const std::string& what, bool out_of_memory = false);

// ============================================================================ profiling
// profile.cpp: gpumat.profile's counters (emulator.h's profile_* functions). A launch that runs
// while profiling is on gets a LaunchProfile; each block's accesses are grouped into warp requests
// at its barriers and at its end.

struct LaunchSpec;
struct LaunchProfile;
LaunchProfile* profile_launch_begin(const LaunchSpec& spec);  // nullptr when profiling is off
void profile_block_begin(Active& a, LaunchProfile* launch);   // a.profile set (or left null)
void profile_barrier(Active& a);                              // all threads of the block arrived
void profile_block_end(Active& a, bool faulted);              // a.profile reset to null
void profile_launch_end(LaunchProfile* launch, bool ok);      // recorded when ok; deleted
// One access of the running thread (n bytes at p, Kind bits, `pc`: the instrumented instruction).
void profile_access(Active& a, uintptr_t p, size_t n, unsigned kind, uintptr_t pc);
double take_noted_flops();  // note_flops' value for the launch being made (-1: none), then cleared

// ============================================================================ launches

// A launch as the engine runs it. `args` owns the kernel's argument block (args_bytes long).
struct LaunchSpec {
  const void* kernel = nullptr;
  const char* name = "";
  Dim grid, block;
  size_t smem = 0;
  ThreadBody body = nullptr;
  ThreadBody unchecked = nullptr;  // the kernel's unchecked build, or nullptr (always checked)
  std::shared_ptr<void> args;
  size_t args_bytes = 0;
  unsigned checks = 0;         // enabled_checks() when it was launched
  uint32_t check_repeats = 0;  // check_repeats() when it was launched
  double flops = -1;           // the launcher's FLOP count (note_flops), -1: not given
};

// Runs the whole grid on the calling thread (blocks spread over OpenMP workers) and returns
// cudaSuccess, or the failure with its details in *detail.
cudaError_t execute(const LaunchSpec& spec, std::string* detail);

}  // namespace gpumat::emulator::detail
