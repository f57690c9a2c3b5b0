// GpuMatrix: construction with overflow-checked sizes, RAII ownership, host/device copies.
#include "gpumat/gpu_matrix.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "cuda/runtime.h"
#include "gpumat/allocator.h"
#include "gpumat/error.h"

namespace gpumat {

int64_t GpuMatrix::checked_size(const std::vector<int64_t>& shape) {
  for (int64_t d : shape)
    if (d < 0) throw ShapeError("GpuMatrix: negative dimension in shape " + shape_to_string(shape));
  for (int64_t d : shape)
    if (d == 0) return 0;
  // The element count and its byte size must fit int64: check the running product at each step.
  const int64_t kMaxElements = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(sizeof(float));
  int64_t size = 1;
  for (int64_t d : shape) {
    if (size > kMaxElements / d)
      throw OutOfMemory("GpuMatrix: shape " + shape_to_string(shape) + " is too large to allocate");
    size *= d;
  }
  return size;
}

GpuMatrix::GpuMatrix(std::vector<int64_t> shape, Device device)
    : shape_(std::move(shape)), size_(checked_size(shape_)), device_(device) {
  check_device(device_);
  data_ = static_cast<float*>(device_allocate(device_, static_cast<size_t>(nbytes())));
}

GpuMatrix::GpuMatrix(const GpuMatrix& base, std::vector<int64_t> shape, int64_t offset)
    : shape_(std::move(shape)), size_(checked_size(shape_)), device_(base.device_), owns_(false) {
  if (offset < 0 || size_ > base.size_ || offset > base.size_ - size_)
    throw ShapeError("view: shape " + shape_str() + " at offset " + std::to_string(offset) +
                     " does not fit in its base " + base.shape_str());
  data_ = size_ > 0 ? base.data_ + offset : nullptr;
}

GpuMatrix::GpuMatrix(float* data, std::vector<int64_t> shape, Device device)
    : shape_(std::move(shape)), size_(checked_size(shape_)), device_(device), owns_(false) {
  check_device(device_);
  if (size_ > 0 && data == nullptr)
    throw ShapeError("foreign view: null data pointer for shape " + shape_str());
  if (reinterpret_cast<uintptr_t>(data) % alignof(float) != 0)
    throw ShapeError("foreign view: data pointer is not aligned to a float (4 bytes)");
  data_ = size_ > 0 ? data : nullptr;
}

GpuMatrix::~GpuMatrix() {
  if (owns_) device_free(device_, data_);
}

GpuMatrix::GpuMatrix(GpuMatrix&& other) noexcept
    : shape_(std::move(other.shape_)),
      size_(other.size_),
      device_(other.device_),
      data_(other.data_),
      owns_(other.owns_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.shape_.clear();
}

GpuMatrix& GpuMatrix::operator=(GpuMatrix&& other) noexcept {
  if (this != &other) {
    if (owns_) device_free(device_, data_);
    shape_ = std::move(other.shape_);
    size_ = other.size_;
    device_ = other.device_;
    data_ = other.data_;
    owns_ = other.owns_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.shape_.clear();
  }
  return *this;
}

int64_t GpuMatrix::dim(int64_t axis) const {
  int64_t n = ndim();
  int64_t a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n)
    throw ShapeError("axis " + std::to_string(axis) + " is out of range for shape " + shape_str());
  return shape_[static_cast<size_t>(a)];
}

std::string GpuMatrix::shape_str() const { return shape_to_string(shape_); }

void GpuMatrix::copy_from_host(const float* src, int64_t n) {
  if (n != size_)
    throw ShapeError("copy_from_host: " + std::to_string(n) + " elements given for an array of shape " +
                     shape_str());
  if (size_ == 0) return;
  if (!device_.is_host()) {
    runtime_for(device_).copy_host_to_device(device_.index, data_, src, static_cast<size_t>(nbytes()));
    return;
  }
  std::memcpy(data_, src, static_cast<size_t>(nbytes()));
}

void GpuMatrix::copy_to_host(float* dst, int64_t n) const {
  if (n != size_)
    throw ShapeError("copy_to_host: room for " + std::to_string(n) +
                     " elements given for an array of shape " + shape_str());
  if (size_ == 0) return;
  if (!device_.is_host()) {
    runtime_for(device_).copy_device_to_host(device_.index, dst, data_, static_cast<size_t>(nbytes()));
    return;
  }
  std::memcpy(dst, data_, static_cast<size_t>(nbytes()));
}

void GpuMatrix::copy_from(const GpuMatrix& src) {
  if (src.size_ != size_)
    throw ShapeError("copyfrom: source of shape " + src.shape_str() + " does not fit an array of shape " +
                     shape_str());
  if (size_ == 0 || src.data_ == data_) return;
  const Device& s = src.device_;
  const size_t bytes = static_cast<size_t>(nbytes());
  if (s.is_host() && device_.is_host()) {
    std::memcpy(data_, src.data_, bytes);
  } else if (s.is_host()) {
    runtime_for(device_).copy_host_to_device(device_.index, data_, src.data_, bytes);
  } else if (device_.is_host()) {
    runtime_for(s).copy_device_to_host(s.index, data_, src.data_, bytes);
  } else if (s.kind == device_.kind) {
    if (s.index == device_.index)
      runtime_for(device_).copy_device_to_device(device_.index, data_, src.data_, bytes);
    else
      runtime_for(device_).copy_peer(device_.index, data_, s.index, src.data_, bytes);
  } else {
    // Between a GPU and the emulated device: through a host buffer.
    std::vector<float> staging(static_cast<size_t>(size_));
    runtime_for(s).copy_device_to_host(s.index, staging.data(), src.data_, bytes);
    runtime_for(device_).copy_host_to_device(device_.index, data_, staging.data(), bytes);
  }
}

}  // namespace gpumat
