// Caching allocator (see allocator.h). One Pool per device; each keeps free blocks in bins keyed
// by rounded size. Host blocks come from aligned_alloc, CUDA blocks from cudaMalloc.
#include "gpumat/allocator.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/runtime.h"
#include "gpumat/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GPUMAT_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define GPUMAT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define GPUMAT_POISON(p, n) ((void)(p), (void)(n))
#define GPUMAT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace gpumat {

namespace {

constexpr size_t kSmallLimit = 1 << 20;  // requests under 1 MiB ...
constexpr size_t kSmallRound = 512;      // ... round up to 512 B
constexpr size_t kLargeRound = 2 << 20;  // larger ones to 2 MiB
constexpr size_t kHostAlignment = 64;    // a cache line: good for SIMD loads

class Pool {
 public:
  explicit Pool(Device device) : device_(device) {}

  void* allocate(size_t nbytes) {
    if (nbytes == 0) return nullptr;
    size_t size = allocation_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.num_alloc_requests++;
    void* ptr = nullptr;
    auto bin = free_.find(size);
    if (bin != free_.end() && !bin->second.empty()) {
      ptr = bin->second.back();
      bin->second.pop_back();
    } else {
      ptr = raw_allocate_with_retry(size);
      stats_.device_malloc_calls++;
      stats_.bytes_reserved += static_cast<int64_t>(size);
    }
    in_use_[ptr] = size;
    stats_.bytes_in_use += static_cast<int64_t>(size);
    // Sanitizer builds: the rounding slack and cached blocks are off limits, so an access past the
    // requested size faults (host and emulated memory only: real device memory has no shadow).
    if (!device_.is_cuda()) {
      GPUMAT_UNPOISON(ptr, nbytes);
      GPUMAT_POISON(static_cast<char*>(ptr) + nbytes, size - nbytes);
    }
    mark_block(ptr, nbytes);
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
    return ptr;
  }

  void free(void* ptr) noexcept {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = in_use_.find(ptr);
    if (it == in_use_.end()) return;  // not ours: ignore rather than corrupt the pool
    size_t size = it->second;
    in_use_.erase(it);
    stats_.bytes_in_use -= static_cast<int64_t>(size);
    if (!device_.is_cuda()) GPUMAT_POISON(ptr, size);
    mark_block(ptr, 0);
    try {
      free_[size].push_back(ptr);
    } catch (...) {  // vector growth failed: give the block straight back instead
      raw_free(ptr, size);
      stats_.bytes_reserved -= static_cast<int64_t>(size);
      stats_.device_free_calls++;
    }
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

 private:
  void release_cached_locked() noexcept {
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) {
        raw_free(p, size);
        stats_.bytes_reserved -= static_cast<int64_t>(size);
        stats_.device_free_calls++;
      }
      blocks.clear();
    }
    free_.clear();
  }

  // One retry after giving every cached block back, as PyTorch and CuPy do.
  void* raw_allocate_with_retry(size_t size) {
    try {
      return raw_allocate(size);
    } catch (const OutOfMemory&) {
      release_cached_locked();
    }
    try {
      return raw_allocate(size);
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(out_of_memory_message(size, e.what()));
    }
  }

  std::string out_of_memory_message(size_t size, const char* cause) const {
    std::string msg = "out of memory on " + device_.str() + ": could not allocate " + std::to_string(size) +
                      " bytes (" + cause + "); in use by gpumat: " + std::to_string(stats_.bytes_in_use) +
                      " bytes";
    if (!device_.is_host()) {
      size_t free_b = 0, total_b = 0;
      runtime_for(device_).mem_get_info(device_.index, &free_b, &total_b);
      msg += "; device free " + std::to_string(free_b) + " of " + std::to_string(total_b) + " bytes";
    }
    return msg;
  }

  // Tells the emulated device's memory checks which bytes of the block are in use (see runtime.h).
  void mark_block(void* ptr, size_t nbytes) noexcept {
    if (device_.is_host()) return;
    const DeviceRuntime& rt = runtime_for(device_);
    if (rt.mark_block != nullptr) rt.mark_block(device_.index, ptr, nbytes);
  }

  void* raw_allocate(size_t size) {
    if (!device_.is_host()) return runtime_for(device_).malloc_device(device_.index, size);
    void* p = std::aligned_alloc(kHostAlignment, size);  // size is a multiple of 512
    if (p == nullptr) throw OutOfMemory("aligned_alloc failed");
    return p;
  }

  void raw_free(void* p, size_t size) noexcept {
    if (!device_.is_cuda()) GPUMAT_UNPOISON(p, size);
    if (!device_.is_host()) {
      runtime_for(device_).free_device(device_.index, p);
      return;
    }
    std::free(p);
  }

  Device device_;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // rounded size -> cached blocks
  std::unordered_map<void*, size_t> in_use_;   // block -> rounded size
  MemoryStats stats_;
};

// Pools live for the whole process and are never destroyed: arrays held by Python objects may be
// freed during interpreter shutdown, after static destructors would have run.
Pool& pool_for(const Device& device) {
  static std::mutex mutex;
  static auto* pools = new std::map<std::pair<int, int>, Pool*>();
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  auto it = pools->find(key);
  if (it == pools->end()) it = pools->emplace(key, new Pool(device)).first;
  return *it->second;
}

}  // namespace

size_t allocation_size(size_t nbytes) {
  size_t round = nbytes < kSmallLimit ? kSmallRound : kLargeRound;
  return (nbytes + round - 1) / round * round;
}

void* device_allocate(const Device& device, size_t nbytes) {
  check_device(device);
  return pool_for(device).allocate(nbytes);
}

void device_free(const Device& device, void* ptr) noexcept {
  if (ptr != nullptr) pool_for(device).free(ptr);
}

MemoryStats memory_stats(const Device& device) {
  check_device(device);
  return pool_for(device).stats();
}

void reset_peak_memory_stats(const Device& device) {
  check_device(device);
  pool_for(device).reset_peak();
}

void empty_cache(const Device& device) {
  check_device(device);
  pool_for(device).empty_cache();
}

}  // namespace gpumat
