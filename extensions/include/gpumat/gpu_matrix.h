// GpuMatrix: an N-d, row-major, contiguous float32 array on one device ("matrix" is the
// cuda-project interface's name; any rank is supported, conv needs 4-D). It owns its buffer through the
// caching allocator (RAII: freed in the destructor), and is movable, not copyable.
//
// Zero-size arrays (a dimension of 0) are valid and own no memory; rank 0 is a scalar of size 1.
// A view shares a contiguous run of another array's elements (the first ones, or from an offset)
// under its own shape and owns nothing: the caller keeps the base alive (PyGpuMatrix holds a
// reference to it).
// A foreign view (the (data, shape, device) constructor) wraps memory gpumat did not allocate
// (DLPack, the CUDA array interface) and owns nothing either: it never reaches the allocator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpumat/device.h"

namespace gpumat {

class GpuMatrix {
 public:
  // Allocates an uninitialised array. Throws ShapeError for a negative dimension or a size whose
  // byte count overflows int64, OutOfMemory, or CudaError for a device that does not exist.
  GpuMatrix(std::vector<int64_t> shape, Device device);
  ~GpuMatrix();
  GpuMatrix(GpuMatrix&& other) noexcept;
  GpuMatrix& operator=(GpuMatrix&& other) noexcept;
  GpuMatrix(const GpuMatrix&) = delete;
  GpuMatrix& operator=(const GpuMatrix&) = delete;

  // A view: a non-owning array of `shape` over `base`'s elements [offset, offset + size). Throws
  // ShapeError if they are not all inside `base`, for a negative offset or dimension.
  GpuMatrix(const GpuMatrix& base, std::vector<int64_t> shape, int64_t offset = 0);

  // A foreign view: a non-owning array of `shape` over `data`, memory that another library owns
  // (DLPack import). The destructor never frees it and the caching allocator never sees it; the
  // caller keeps the memory alive while this object exists (PyGpuMatrix holds the DLPack owner).
  // `data` must be 4-byte aligned (a float) and may be null only for a zero-size shape. Throws
  // ShapeError for a negative dimension, a null or misaligned pointer; CudaError for a device that
  // does not exist.
  GpuMatrix(float* data, std::vector<int64_t> shape, Device device);

  bool owns_data() const { return owns_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t axis) const;  // negative axes count from the end; ShapeError if out of range
  int64_t size() const { return size_; }
  int64_t nbytes() const { return size_ * static_cast<int64_t>(sizeof(float)); }
  const Device& device() const { return device_; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  std::string shape_str() const;

  // Host memory <-> this array. `n` must equal size() (ShapeError). Device-to-host copies
  // synchronize the device's stream, so the data is ready when they return.
  void copy_from_host(const float* src, int64_t n);
  void copy_to_host(float* dst, int64_t n) const;
  // Copies another array of the same size (any shape of that size; any device: an explicit copy).
  void copy_from(const GpuMatrix& src);

 private:
  static int64_t checked_size(const std::vector<int64_t>& shape);

  std::vector<int64_t> shape_;
  int64_t size_ = 0;
  Device device_;
  float* data_ = nullptr;
  bool owns_ = true;
};

}  // namespace gpumat
