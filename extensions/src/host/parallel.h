// OpenMP helpers for the host kernels. Loops below kParallelMin elements run on one thread: the
// fork/join costs more than the work.
#pragma once

#include <cstdint>

namespace gpumat::host {
constexpr int64_t kParallelMin = 1 << 15;

// body(i) for every i in [0, n): split across the OpenMP threads when `work` (the elements the
// loop touches) is at least kParallelMin, else a plain loop on the calling thread, in order.
// NOTE: a plain loop, not an `if` clause: a parallel region whose if-clause is false still makes
// and frees a one-thread team (about 0.5 us a call with libgomp), more than a small kernel's work
// and a large part of a compiled training step of small layers.
template <typename Body>
inline void parallel_for(int64_t n, int64_t work, const Body& body) {
  if (work < kParallelMin) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) body(i);
}

// The sum of term(i) for i in [0, n), in double: across the OpenMP threads (an OpenMP reduction)
// when `work` is at least kParallelMin, else in order on the calling thread (the same value as a
// one-thread reduction, without the region's cost; see parallel_for).
template <typename Term>
inline double parallel_sum(int64_t n, int64_t work, const Term& term) {
  double total = 0.0;
  if (work < kParallelMin) {
    for (int64_t i = 0; i < n; ++i) total += term(i);
    return total;
  }
#pragma omp parallel for reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += term(i);
  return total;
}
}  // namespace gpumat::host
