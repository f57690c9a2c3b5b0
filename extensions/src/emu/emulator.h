// The CUDA emulator: runs gpumat's CUDA sources (src/cuda/*.cu), compiled by the host C++ compiler,
// on the CPU, as the emulated device `emu:N`. It is a correctness tool (the way compute-sanitizer is
// one on a GPU): nothing it times says anything about speed on a GPU; what it counts (profile.cpp:
// warp requests, sectors, bank conflicts, for gpumat.profile's estimates) does.
//
// Execution model
// - Launches and asynchronous copies are queued on their stream and run, in order, by that stream's
//   worker thread, so the host returns before the work is done, as on a GPU (at most 1024 queued
//   operations per stream: a launch past that waits). GPUMAT_EMU_LAUNCH_BLOCKING=1 runs each one
//   before its call returns, so a kernel's fault is returned by its launch. A launch's blocks are
//   spread over OpenMP threads; each block runs entirely on one of them.
// - Each CUDA thread of a block is a fiber (a user-mode context with its own stack) on that worker.
//   Fibers rather than one OS thread per CUDA thread, because: (1) a block of 1,024 threads would
//   need 1,024 OS threads and a futex round trip per barrier, thousands of times slower; (2) only
//   fibers let the emulator choose, and reproduce, the order in which threads run. The switch is a
//   few instructions of assembly on x86-64 and ucontext elsewhere.
// - Adversarial scheduling: between two barriers the threads of a block run one after another, each
//   until it reaches a barrier or ends, in an order drawn from a seeded random permutation. A kernel
//   that reads shared memory without a __syncthreads() after another thread's write therefore sees
//   stale data for most seeds instead of passing by luck. The seed comes from GPUMAT_EMU_SEED
//   (default 1); the order of block b of a launch depends only on (seed, kernel name, launch
//   geometry, b), so a failing test re-run alone with the same seed schedules identically.
// - __syncthreads() is a barrier of all threads of the block; reaching it after some threads of the
//   block have exited (a barrier in divergent code, undefined on a GPU) is reported as a fault.
// - Warps are lanes 32w..32w+31 of the linearised thread index. Shuffles, votes and __syncwarp are
//   warp barriers of the lanes named in the mask: every named lane must reach the same collective
//   with the same mask, else the launch faults. A shuffle from a lane outside the mask returns a
//   poison value (NaN for floats), as the hardware's value is undefined.
// - __shared__ variables are per-worker thread_local storage: private to the running block, shared
//   by its threads. Shared memory is undefined at every block start: dynamic shared memory (extern
//   __shared__, through dynamic_smem()) is filled with 0xFF bytes (float NaN), and a static
//   __shared__ word that no thread of the block has written reads as NaN (the checks' shadow
//   poisons it on that read), never as the previous block's value.
// - Checks (the hooks in checks.cpp; the kernels are compiled with gcc's -fsanitize=thread and
//   -fsanitize=bounds,alignment instrumentation, whose calls the emulator itself defines): every
//   load, store and atomic of a kernel is checked. memcheck: a global access outside the live bytes
//   of an allocation (the caching allocator's rounding slack and cached blocks included), a shared
//   access past an array or the dynamic shared memory, a misaligned access. racecheck: two threads
//   of a block touching one shared word in one barrier interval, one of them writing (unless a
//   __syncwarp orders them within a warp); plain (non-atomic) writes of two blocks of one launch
//   to one global word. initcheck: a read of device or shared memory nothing has written. A
//   violation ends the launch with a report naming the kernel, block, thread, address and
//   allocation. GPUMAT_EMU_CHECKS selects them (all, none, or a comma list of memcheck, racecheck,
//   initcheck; default all; any other value fails the launch, naming the valid ones).
// - Repeated launches: every kernel is also built without the instrumentation (its unchecked
//   build). A launch that repeats one which has passed the checks GPUMAT_EMU_CHECK_REPEATS times
//   (default 3; "all" or 0: every launch is checked) runs the unchecked build, about 3x faster: the
//   same kernel, geometry, dynamic shared memory, argument bytes, enabled checks and schedule seed,
//   with no device allocation made, freed or handed out by gpumat's allocator since (so its
//   pointers name the same live allocations, whose initcheck state the checked runs have set). A
//   training loop's steps are such repeats. What the checked runs cannot see is a fault that only
//   the later data causes (an index read from memory); its static __shared__ memory is not
//   poisoned. gpumat.profile always runs the checked build (its counters are the hooks').
// - cp.async copies are delivered at cp_async_wait (the latest moment the hardware may deliver
//   them), so a read of the destination before the wait sees old data. mma and other PTX have no
//   emulation: kernels keep a portable fallback behind the GPUMAT_EMULATED macro.
// - Launch limits are a GPU's: block dims x, y <= 1024, z <= 64, <= 1024 threads; grid x < 2^31,
//   y, z <= 65535; dynamic shared memory <= 48 KiB unless raised with cudaFuncSetAttribute (at most
//   227 KiB). A launch outside them fails with cudaErrorInvalidConfiguration, as on a GPU.
//   GPUMAT_EMU_MAX_GRID_Y / GPUMAT_EMU_MAX_GRID_Z lower the grid.y / grid.z limits (enforced and
//   reported by cudaDeviceGetAttribute alike), so tests reach the loops that launchers run past
//   65,535 tiles with small arrays. Static shared memory (__shared__ arrays) is not checked here:
//   the emulator sees only thread_local variables, not their total per kernel; on a GPU ptxas
//   rejects a kernel whose static shared memory exceeds 48 KiB at build time (CI's nvcc build).
// - Device memory is host memory owned by the emulator: allocations are filled with 0xFF (NaN),
//   memcpy/memset ranges are checked against live allocations, and the device has a capacity
//   (GPUMAT_EMU_MEMORY_BYTES, default 8 GiB) past which cudaMalloc fails with
//   cudaErrorMemoryAllocation. It fails so too when the host cannot back the allocation: each is
//   charged 13/4 host bytes per byte (the data, initcheck's and racecheck's shadows) against
//   MemAvailable and GPUMAT_EMU_HOST_MEMORY_BYTES (docs/emulator.md, "Host memory"). The
//   AddressSanitizer build (make emu-sanitize) cannot have the checks' instrumentation; there ASan
//   reports an out-of-range access, naming the kernel, block and thread (the death callback in
//   emulator.cpp).
// - Faults found while a kernel runs (barrier divergence, bad warp masks, a deadlock, an exception)
//   abandon the launch and are returned by the next cudaGetLastError() as cudaErrorLaunchFailure;
//   cudaGetErrorString() then appends the details (kernel, block, thread, what). They are not
//   sticky: unlike a GPU context, the emulated device stays usable. A launch that finds no host
//   memory for its fiber stacks or for a shadow the checks allocate as it runs (racecheck's, at
//   the first plain write to an allocation) fails with cudaErrorMemoryAllocation instead, once:
//   the next launch tries again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpumat::emulator {

// Launch geometry, in the emulator's own plain types (the shim's dim3 converts to it).
struct Dim {
  unsigned x = 1, y = 1, z = 1;
};

// One emulated CUDA thread's work: `run(args)` executes the kernel body for the thread whose
// indices are current (threadIdx, blockIdx, ...).
using ThreadBody = void (*)(void* args);

// Queues a kernel launch on `stream` (records it while the stream is captured) and returns
// cudaSuccess or the configuration error (an int: the shim's cudaError_t). `args` is the launch's
// argument block (args_bytes long), kept until the launch has run. `kernel` identifies the kernel
// for cudaFuncSetAttribute; `name` is used in fault reports.
// `unchecked`: the kernel's unchecked build (see "Checks" above), or nullptr.
int launch(const void* kernel, const char* name, Dim grid, Dim block, size_t dynamic_smem, void* stream,
           ThreadBody body, ThreadBody unchecked, std::shared_ptr<void> args, size_t args_bytes);

// The unchecked builds of the kernels (src/cuda/*.cu compiled a second time without the checks'
// instrumentation, -DGPUMAT_EMU_UNCHECKED, into namespace gpumat::emu_unchecked), by kernel name:
// each registers itself when the library loads; a checked launch looks up its twin. A name
// registered twice (two kernels of one name in anonymous namespaces) has no twin: always checked.
void register_unchecked(const std::string& kernel_name, ThreadBody body);
ThreadBody find_unchecked(const std::string& kernel_name);

// gpumat's caching allocator tells the checks which bytes of a device block are in use, in the
// order of `stream`'s work: `live_bytes` of the block at `ptr` (from cudaMalloc) handed out to a
// new user (which also poisons the block and marks it uninitialised), or 0: returned to the cache.
void mark_allocation(void* stream, void* ptr, size_t live_bytes);

// True when instrumented kernels are loaded, so memcheck, racecheck and initcheck run (false in the
// AddressSanitizer build of `make emu-sanitize`, which cannot have the instrumentation).
bool checks_compiled();

// GPUMAT_EMU_MAX_BLOCKS, or 0 when unset: the most blocks a launcher gives a grid-stride loop, so
// that tests make every thread take several iterations with small arrays (read at every call).
int64_t max_blocks();

// GPUMAT_EMU_WIDE_INDEX set (not 0): the strided kernels take their 64-bit index path even where
// every array is small, so that tests reach it without arrays of 2**31 elements.
bool wide_index();

// Barrier of the running block. sync_block_count returns how many threads passed pred != 0.
void sync_block();
int sync_block_count(int pred);

// Warp collectives. kind: which one (for the same-collective check); mask: the lanes taking part;
// value: this lane's payload; src_lane: for shuffles, the lane whose payload this lane receives (-1
// for none). Returns the received payload (shuffles), or the ballot of the lanes' payloads != 0
// (votes), as 64 raw bits.
enum class WarpOp { Sync, Shuffle, Ballot };
uint64_t warp_collective(WarpOp kind, unsigned mask, uint64_t value, int src_lane);
int lane_id();
unsigned active_mask();

// The running block's dynamic shared memory (16-byte aligned), and cp.async emulation.
void* dynamic_smem();
void cp_async(void* dst, const void* src, size_t bytes, size_t src_bytes);
void cp_async_commit();
void cp_async_wait(int pending_groups);

// Reports a fault in the running thread (e.g. a misused intrinsic) and abandons the block.
[[noreturn]] void device_fault(const char* what);

// Profiling (profile.cpp; gpumat.profile): while enabled, every launch that runs records per-launch
// counters of its global and shared memory requests (what they mean: the header of profile.cpp).
// Off by default; when off the access hooks test one pointer and count nothing.
void profile_enable(bool on);
bool profile_enabled();
// The names of the values of each record, in order.
std::vector<std::string> profile_fields();
// How many of profile_fields, from the first, are counted (summed over a launch's accesses and
// over the launches of a kernel); the rest describe the launch (grid, block, flops).
int profile_summed_count();
// The records of the launches that ran (in completion order) since the last call: (kernel name,
// values in profile_fields' order); cleared.
std::vector<std::pair<std::string, std::vector<double>>> profile_take();
// The FLOPs of the next launch made by this host thread (from the op's shapes; -1: unknown).
void note_flops(double flops);

}  // namespace gpumat::emulator
