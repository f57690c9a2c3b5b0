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

// body(lo, hi) over consecutive chunks [lo, hi) covering [0, n), for loops that want a plain
// inner loop (`#pragma omp simd` over the chunk): chunks of kChunk elements split across the
// OpenMP threads when `work` is at least kParallelMin, else one chunk on the calling thread.
template <typename Body>
inline void parallel_chunks(int64_t n, int64_t work, const Body& body) {
  constexpr int64_t kChunk = 1 << 12;
  if (work < kParallelMin) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for
  for (int64_t c = 0; c < chunks; ++c) body(c * kChunk, c + 1 < chunks ? (c + 1) * kChunk : n);
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
