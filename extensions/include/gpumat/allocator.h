// A caching allocator per device, modelled on PyTorch's CUDACachingAllocator and CuPy's
// SingleDeviceMemoryPool: sizes are rounded up into bins; freed blocks go to a free list per bin
// and are handed out again, so a steady-state training loop makes no cudaMalloc calls. On a
// failed allocation the cache is emptied and the allocation retried once before OutOfMemory.
//
// Rounding: requests under 1 MiB round up to a multiple of 512 bytes; larger ones to a multiple of
// 2 MiB. A block is reused only for requests of the same rounded size.
// Thread safety: one mutex per device allocator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpumat/device.h"

namespace gpumat {

struct MemoryStats {
  int64_t device_malloc_calls = 0;  // calls to cudaMalloc (or the host's aligned allocation)
  int64_t device_free_calls = 0;    // blocks returned to the device by empty_cache()
  int64_t bytes_in_use = 0;         // bytes of blocks handed out and not yet freed (rounded sizes)
  int64_t peak_bytes_in_use = 0;    // the maximum of bytes_in_use since start or reset_peak
  int64_t bytes_reserved = 0;       // bytes held from the device: in use plus cached
  int64_t num_alloc_requests = 0;   // allocate() calls, cache hits included
};

// Returns a block of at least `nbytes` bytes (256-byte aligned on CUDA, 64 on the host), or
// nullptr for nbytes == 0. Throws OutOfMemory (naming the size and the device's totals) or
// CudaError.
void* device_allocate(const Device& device, size_t nbytes);

// Returns a block from device_allocate to the cache. Never throws. Safe with nullptr.
void device_free(const Device& device, void* ptr) noexcept;

MemoryStats memory_stats(const Device& device);
void reset_peak_memory_stats(const Device& device);

// Gives every cached (free) block back to the device (cudaFree / free). Blocks in use stay.
void empty_cache(const Device& device);

// Rounded size that a request of `nbytes` occupies (exposed for tests and the executor's plan).
size_t allocation_size(size_t nbytes);

}  // namespace gpumat
