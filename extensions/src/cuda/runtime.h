// Plain-C++ interface to a CUDA runtime, so that the device-agnostic sources (allocator.cpp,
// gpu_matrix.cpp, device.cpp) never include CUDA headers. runtime.cu implements it twice: against
// the real CUDA runtime (cuda::runtime(), built by nvcc) and against the emulator
// (emu::runtime(), built by the host compiler, see ../emu/emulator.h). Every function checks its
// CUDA calls and throws CudaError (OutOfMemory for a failed cudaMalloc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpumat/device.h"

namespace gpumat {

struct DeviceRuntime {
  int (*device_count)() noexcept;                  // 0 when there is no driver or device
  void* (*malloc_device)(int dev, size_t nbytes);  // throws OutOfMemory / CudaError
  void (*free_device)(int dev, void* ptr) noexcept;
  void (*mem_get_info)(int dev, size_t* free_bytes, size_t* total_bytes) noexcept;
  // Copies on the device's stream. copy_device_to_host and copy_peer synchronize before returning;
  // copy_host_to_device returns once `src` may be reused (small copies are staged through pinned
  // buffers and queued, larger ones synchronize), and later work on the stream sees the data.
  void (*copy_host_to_device)(int dev, void* dst, const void* src, size_t nbytes);
  void (*copy_device_to_host)(int dev, void* dst, const void* src, size_t nbytes);
  void (*copy_device_to_device)(int dev, void* dst, const void* src, size_t nbytes);
  void (*copy_peer)(int dst_dev, void* dst, int src_dev, const void* src, size_t nbytes);
  void (*synchronize)(int dev);
  uintptr_t (*stream_handle)(int dev);  // the device's stream (cudaStream_t) as an integer
  // CUDA graphs (Program, program.h). begin_capture starts capturing, on a stream of the calling
  // thread's own (cudaStreamCaptureModeThreadLocal): until end_capture or abort_capture, this
  // thread's work on `dev` goes to that stream and is recorded, while other threads' work keeps
  // running on the device's stream, never recorded into this graph. end_capture ends it and
  // instantiates the graph: an executable handle, with the graph's node count in *nodes (throws
  // CudaError, the capture ended, if it was invalidated); abort_capture ends a capture in progress
  // on this thread and drops it (no-op when none runs).
  void (*begin_capture)(int dev);
  void* (*end_capture)(int dev, size_t* nodes);
  void (*abort_capture)(int dev) noexcept;
  // Queues the graph on the device's stream, unless a workspace was reallocated since the graph
  // was captured at `workspaces` (a workspace_generation() value): then it returns false and
  // launches nothing, as the graph holds a pointer to the freed block. The check and the launch
  // happen under the workspaces' lock, so no reallocation can slip in between.
  bool (*graph_launch)(int dev, void* exec, uint64_t workspaces);
  void (*graph_destroy)(void* exec) noexcept;
  // Counts the reallocations of the device's workspaces (common.cuh's workspace()).
  uint64_t (*workspace_generation)(int dev) noexcept;
};

#ifdef GPUMAT_WITH_CUDA
namespace cuda {
const DeviceRuntime& runtime();
}
#endif
namespace emu {
const DeviceRuntime& runtime();
}

// The runtime of a CUDA or emulated device; throws CudaError for the host or a build without CUDA.
const DeviceRuntime& runtime_for(const Device& device);

}  // namespace gpumat
