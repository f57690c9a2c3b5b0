// OpenMP helpers for the host kernels. Loops below kParallelMin elements run on one thread: the
// fork/join costs more than the work.
#pragma once

#include <cstdint>

namespace gpumat::host {
constexpr int64_t kParallelMin = 1 << 15;

// The threads of every OpenMP region of the host kernels: gpumat::ops::set_num_threads's count
// (with GPUMAT_DYNAMIC_THREADS=1, lowered to the cores other processes leave free: parallel.cpp).
// A num_threads clause reads it per region, so it holds on every calling thread
// (omp_set_num_threads sets only the caller's).
int region_threads();
// Gives OpenBLAS's next calls region_threads() threads (its count is process-wide; set when it
// changes); call it before each sgemm.
void blas_threads();

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
#pragma omp parallel for num_threads(region_threads())
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
#pragma omp parallel for reduction(+ : total) num_threads(region_threads())
  for (int64_t i = 0; i < n; ++i) total += term(i);
  return total;
}
}  // namespace gpumat::host
