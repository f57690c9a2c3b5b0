// Plain-C++ interface to the CUDA runtime, implemented in runtime.cu, so that the device-agnostic
// sources (allocator.cpp, gpu_matrix.cpp, ops.cpp) never include CUDA headers. Every function
// checks its CUDA calls and throws CudaError (OutOfMemory for a failed cudaMalloc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpumat::cuda {

int device_count() noexcept;                  // 0 when there is no driver or device
void* malloc_device(int dev, size_t nbytes);  // throws OutOfMemory / CudaError
void free_device(int dev, void* ptr) noexcept;
void mem_get_info(int dev, size_t* free_bytes, size_t* total_bytes) noexcept;
// Copies on the device's stream; the *_to_host copy synchronizes before returning.
void copy_host_to_device(int dev, void* dst, const void* src, size_t nbytes);
void copy_device_to_host(int dev, void* dst, const void* src, size_t nbytes);
void copy_device_to_device(int dev, void* dst, const void* src, size_t nbytes);
void copy_peer(int dst_dev, void* dst, int src_dev, const void* src, size_t nbytes);
void synchronize(int dev);
uintptr_t stream_handle(int dev);  // the device's stream (cudaStream_t) as an integer

}  // namespace gpumat::cuda
