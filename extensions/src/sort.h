// The sort family's order, shared by the host and CUDA kernels (host/sort.cpp, cuda/sort.cu), so
// both devices order every slice the same way: the stable order (torch.sort(stable=True)), a NaN
// sorting as the largest value (after +inf ascending, first descending), ties by index. The array
// is seen as (outer, n, inner), the sorted axis in the middle (../axis.h).
#pragma once

#include <cstdint>

#include "host_device.h"

namespace gpumat::order {

// True when a sorts strictly before b by value: a < b (a > b when descending), NaN the largest.
GPUMAT_HD bool value_before(float a, float b, bool descending) {
  const bool an = a != a, bn = b != b;
  if (descending) return !bn && (an || a > b);
  return !an && (bn || a < b);
}

// True when element j of a slice (value a) sorts before element i (value b): by value, ties
// (equal values, -0 == +0, or both NaN) by index, so the order is a strict total order.
GPUMAT_HD bool before(float a, int64_t j, float b, int64_t i, bool descending) {
  if (value_before(a, b, descending)) return true;
  if (value_before(b, a, descending)) return false;
  return j < i;
}

}  // namespace gpumat::order
