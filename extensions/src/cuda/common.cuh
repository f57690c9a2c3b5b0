// Shared by every .cu file: error checks, the per-device stream, and launch helpers.
// After llm.c's cudaCheck / ceil_div, but a library throws instead of exit(): the sticky error is
// cleared and a CudaError naming the op is raised (as CuPy's check_status does).
//
// The same sources build two devices: nvcc builds them into gpumat::cuda (real GPUs); the host
// compiler with -DGPUMAT_EMULATED builds them into gpumat::emu, the emulated device, against
// ../emu/cuda_runtime.h (see ../emu/emulator.h). Each .cu opens `namespace gpumat::GPUMAT_CUDA_NS`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "gpumat/device.h"
#include "gpumat/error.h"

#if defined(GPUMAT_EMU_UNCHECKED)
#define GPUMAT_CUDA_NS emu_unchecked  // the kernels' unchecked build (see launch below)
#elif defined(GPUMAT_EMULATED)
#define GPUMAT_CUDA_NS emu
#else
#define GPUMAT_CUDA_NS cuda
#endif

namespace gpumat::GPUMAT_CUDA_NS {

// The Device that this build's kernels run on, ordinal `dev` (for scratch arrays).
inline Device kernel_device(int dev) {
#ifdef GPUMAT_EMULATED
  return Device::emu(dev);
#else
  return Device::cuda(dev);
#endif
}

// Throws CudaError "<what>: <cudaErrorName>: <message>" if err != cudaSuccess.
void check(cudaError_t err, const char* what);

// Makes `dev` current on this thread and returns its stream: one non-blocking stream per device,
// created on first use, or the thread's capture stream while this thread captures a CUDA graph on
// `dev` (runtime.h's begin_capture).
cudaStream_t activate(int dev);

// Checks the launch just made (bad configuration, missing kernel image for this GPU).
inline void check_launch(const char* op) { check(cudaGetLastError(), op); }

#ifdef GPUMAT_EMU_UNCHECKED
// The emulated device builds every kernel twice: with the checks' instrumentation (gpumat::emu) and
// without (gpumat::emu_unchecked, this build), which runs the launches that repeat ones the checks
// have passed (GPUMAT_EMU_CHECK_REPEATS, ../emu/emulator.h). This build's launchers never run: the
// instantiation of launch<Kernel> below registers the unchecked Kernel when the library loads.
template <auto Kernel>
struct UncheckedKernel {
  static const bool registered;
};
template <auto Kernel>
const bool UncheckedKernel<Kernel>::registered =
    (emulator::register_unchecked(emulator::kernel_name<Kernel>(), emulator::run_unchecked<Kernel>), true);
#endif

// Every kernel launch goes through here: Kernel<<<grid, block, smem, stream>>>(args...) under nvcc,
// the emulator otherwise, then the launch is checked (CudaError naming `op`).
template <auto Kernel, typename... Args>
void launch(const char* op, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
#if defined(GPUMAT_EMU_UNCHECKED)
  static_cast<void>(&UncheckedKernel<Kernel>::registered);  // an odr-use: instantiates the registration
  emulator::launch_kernel(Kernel, emulator::kernel_name<Kernel>(), grid, block, smem, stream, args...);
#elif defined(GPUMAT_EMULATED)
  static const emulator::ThreadBody unchecked = emulator::find_unchecked(emulator::kernel_name<Kernel>());
  emulator::launch_kernel(Kernel, unchecked, emulator::kernel_name<Kernel>(), grid, block, smem, stream,
                          args...);
#else
  // NOTE: clang-format would split the >>> of a .cuh file.
  // clang-format off
  Kernel<<<grid, block, smem, stream>>>(args...);
  // clang-format on
#endif
  check_launch(op);
}

// Tells the emulated device's profiler (gpumat.profile) how many floating-point operations the
// next launch from this thread does, from the op's shapes (a multiply-add counts 2). Nothing on a GPU.
inline void note_flops(double flops) {
#ifdef GPUMAT_EMULATED
  emulator::note_flops(flops);
#else
  (void)flops;
#endif
}

// The block's dynamic shared memory (the smem bytes of the launch), 16-byte aligned.
template <typename T>
__device__ __forceinline__ T* dynamic_smem() {
#ifdef GPUMAT_EMULATED
  return static_cast<T*>(emulator::dynamic_smem());
#else
  extern __shared__ float4 gpumat_dynamic_smem[];
  return reinterpret_cast<T*>(gpumat_dynamic_smem);
#endif
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A per-device scratch buffer that outlives the call (grown when too small, never shrunk), for ops
// whose kernels pass partial results to each other: a steady-state training step then requests no
// memory at all, not even a cached block. `slot` tells apart buffers one op uses at once. Call it,
// and queue every kernel that uses the buffer, while holding workspace_lock(): another host
// thread's launches then cannot interleave with them on the device's one stream. Recursive: conv
// holds it (slots 1-3) while its matrix products take split-K partials (slot 0).
std::unique_lock<std::recursive_mutex> workspace_lock();
float* workspace(int dev, int slot, int64_t floats);

// Per-device counters in device memory for "last block" reductions (a kernel's blocks count
// themselves done; the last one finishes the job and sets the counter back to 0): kBlockTickets of
// them, block_ticket(dev)[i] (one per output tile of a split-K matmul). Zero when created; use
// them, and queue their kernel, while holding workspace_lock(), as for workspace().
constexpr int64_t kBlockTickets = 256;
unsigned* block_ticket(int dev);

// The most blocks a launcher gives a grid-stride loop: `cap` on a GPU; on the emulated device at
// most GPUMAT_EMU_MAX_BLOCKS when it is set, so that tests make every thread take several
// iterations (and reach the stride arithmetic) with small arrays.
inline int64_t stride_blocks(int64_t cap) {
#ifdef GPUMAT_EMULATED
  const int64_t test_cap = emulator::max_blocks();
  if (test_cap > 0 && test_cap < cap) return test_cap;
#endif
  return cap;
}

// Grid for a 1-D grid-stride loop over n elements: enough blocks to fill the GPU, never more
// than the hardware allows (the kernels loop over the rest).
inline unsigned int grid_for(int64_t n, int block) {
  int64_t blocks = ceil_div(n, block);
  const int64_t kMaxBlocks = stride_blocks(65535LL * 16);  // plenty to fill any GPU; the loop covers the rest
  return static_cast<unsigned int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

constexpr int kBlockSize = 256;  // threads per block for elementwise and 1-D kernels

// The largest grid.x and grid.y a launch on device `dev` may use (cudaDevAttrMaxGridDimX/Y:
// 2^31 - 1 and 65,535 on every GPU since sm_30). Launchers cap the grid at these and the kernels
// loop over the tiles beyond (blockIdx.y + i * gridDim.y), so any shape the host takes runs.
// Asked per call, not cached: the emulated device reports lowered limits when
// GPUMAT_EMU_MAX_GRID_Y (or _Z) is set, so tests reach those loops with small arrays.
struct GridLimits {
  int64_t x, y;
};
GridLimits grid_limits(int dev);

// The sum of v over a block of Threads threads (Threads == blockDim.x, a multiple of 32), returned
// in thread 0 (other threads get 0). Every thread of the block must call it, once per kernel.
// Warp shuffles, then one value per warp through shared memory in a fixed order (llm.c style),
// so the result is deterministic. T is float or double.
template <int Threads, typename T = float>
__device__ T block_sum(T v) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "block_sum: Threads must be a multiple of 32");
  __shared__ T warp_vals[Threads / 32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) warp_vals[threadIdx.x / 32] = v;
  __syncthreads();
  T total = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < Threads / 32; ++w) total += warp_vals[w];
  return total;
}

// out is (n,); f(i) computes element i.
template <typename F>
__global__ void map_kernel(float* out, int64_t n, F f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = f(i);
}

template <typename F>
static void launch_map(const char* op, int dev, float* out, int64_t n, F f) {
  cudaStream_t stream = activate(dev);
  launch<map_kernel<F>>(op, grid_for(n, kBlockSize), kBlockSize, 0, stream, out, n, f);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
