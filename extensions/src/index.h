// The index family's index arithmetic, shared by the host and CUDA kernels (host/index.cpp,
// cuda/index.cu) so both devices resolve an index value the same way. The array is seen as
// (outer, n, inner) around the indexed dim; index is (len,), float32 storage of integers.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace gpumat::index {

// The row that index value v names among n: v for v in [0, n), v + n for v in [-n, 0) (counting
// from the end, as x[-1]); -1 for anything else (out of range, NaN, not a whole number), which the
// kernels turn into a NaN output or a skipped write, never an access out of bounds.
GPUMAT_HD int64_t row_of(float v, int64_t n) {
  const float fn = static_cast<float>(n);
  if (!(v >= -fn && v < fn)) return -1;  // NaN fails too
  const int64_t r = static_cast<int64_t>(v);
  if (static_cast<float>(r) != v || r >= n || r < -n) return -1;
  return r < 0 ? r + n : r;
}

}  // namespace gpumat::index
