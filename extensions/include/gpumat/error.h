// gpumat error types. Every failure in libgpumat throws one of these; the Cython layer maps each to
// one Python exception (see gpumat/_errors.h), so no C++ exception or CUDA fault ever escapes raw.
//
//   ShapeError   -> ValueError   (shapes, sizes, empty or impossible geometry, mixed devices)
//   DTypeError   -> TypeError
//   OutOfMemory  -> MemoryError  (host or device allocation failed after emptying the cache)
//   CudaError    -> gpumat.CudaError (a RuntimeError): a failed CUDA API call or kernel launch
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumat {

class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class DTypeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "(2, 3, 4)"; used in every error message that names shapes.
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace gpumat
