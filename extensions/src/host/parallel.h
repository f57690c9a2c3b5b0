// OpenMP helpers for the host kernels. Loops below kParallelMin elements run on one thread: the
// fork/join costs more than the work.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace gpumat::host {
constexpr int64_t kParallelMin = 1 << 15;

// The threads of every OpenMP region of the host kernels: gpumat::ops::set_num_threads's count
// (with GPUMAT_DYNAMIC_THREADS=1, lowered to the cores other processes leave free: parallel.cpp).
// A num_threads clause reads it per region, so it holds on every calling thread
// (omp_set_num_threads sets only the caller's).
int region_threads();

// The CPUs online (at least 1), read once. Work is cut by this, never by the thread count, so a
// result's bits do not depend on set_num_threads or the load.
inline int64_t cpus_online() {
  static const int64_t cpus = [] {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return static_cast<int64_t>(n > 0 ? n : 1);
  }();
  return cpus;
}

// body(t, slot) for every t in [0, tasks): `threads` OpenMP threads take them one at a time from
// a shared queue (schedule(dynamic)), `slot` being the taking thread's index in [0, threads), so
// that each thread may own one slot of scratch; with threads <= 1, in order on the calling
// thread, slot 0.
template <typename Body>
inline void run_slotted(int64_t tasks, int threads, const Body& body) {
  if (threads <= 1) {
    for (int64_t t = 0; t < tasks; ++t) body(t, 0);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t t = 0; t < tasks; ++t) {
#ifdef _OPENMP
    body(t, omp_get_thread_num());
#else
    body(t, 0);
#endif
  }
}

// The threads for `tasks` tasks: the region's count, at most one per task.
inline int task_threads(int64_t tasks) {
  return static_cast<int>(std::min<int64_t>(region_threads(), tasks));
}

// body(t) for every t in [0, tasks): on the OpenMP threads (run_slotted) when `split`, else in
// order on the calling thread.
template <typename Body>
inline void run_tasks(int64_t tasks, bool split, const Body& body) {
  run_slotted(tasks, split ? task_threads(tasks) : 1, [&](int64_t t, int) { body(t); });
}

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

// Loops in blocks: body(lo, hi) for consecutive ranges covering [0, n), on the OpenMP threads
// when n is at least kParallelMin, else one call on the calling thread. For a body that is a
// function of its own (a SIMD loop, GPUMAT_SIMD_CLONES) rather than one element's work.
constexpr int64_t kBlockElems = 1 << 14;
template <typename Body>
inline void parallel_blocks(int64_t n, const Body& body) {
  if (n < kParallelMin) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  const int64_t blocks = (n + kBlockElems - 1) / kBlockElems;
#pragma omp parallel for num_threads(region_threads())
  for (int64_t b = 0; b < blocks; ++b) body(b * kBlockElems, std::min(n, (b + 1) * kBlockElems));
}

// Loops in blocks over several arrays at once (a multi-tensor optimizer step): body(t, lo, hi) for
// consecutive ranges covering [0, sizes[t]) of every t in [0, count), all in one OpenMP region when
// the arrays hold at least kParallelMin elements together (one region, not one per tensor: a
// region costs a few microseconds, and a step of a small network has many small tensors), else in
// order on the calling thread.
template <typename Body>
inline void parallel_blocks_multi(const int64_t* sizes, int count, const Body& body) {
  int64_t total = 0;
  for (int t = 0; t < count; ++t) total += sizes[t];
  if (total < kParallelMin) {
    for (int t = 0; t < count; ++t)
      if (sizes[t] > 0) body(t, int64_t{0}, sizes[t]);
    return;
  }
  // Every thread meets each tensor's loop in turn (nowait: a thread done with its blocks of one
  // tensor goes on to the next) and takes that tensor's blocks from a shared queue.
#pragma omp parallel num_threads(region_threads())
  for (int t = 0; t < count; ++t) {
    const int64_t n = sizes[t], blocks = (n + kBlockElems - 1) / kBlockElems;
#pragma omp for schedule(dynamic) nowait
    for (int64_t b = 0; b < blocks; ++b) body(t, b * kBlockElems, std::min(n, (b + 1) * kBlockElems));
  }
}

// A function compiled also for AVX-512 and AVX2 (x86-64-v4, -v3) besides the build's baseline,
// the loader picking the best the CPU has (GCC's function multiversioning, ELF ifuncs). For loops
// whose SIMD form needs those instructions; results are the same bits on every version (no fused
// multiply-add is formed across statements: -ffp-contract=off in the Makefile). With GCC 12 and
// later only, the compilers it was built and tested with (support for these arch names in
// target_clones varies among older GCCs and Clangs): elsewhere the baseline alone.
#if defined(__x86_64__) && defined(__ELF__) && !defined(__SANITIZE_ADDRESS__) && defined(__GNUC__) && \
    !defined(__clang__) && __GNUC__ >= 12
#define GPUMAT_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GPUMAT_SIMD_CLONES
#endif

// The sum of term(i) for i in [0, n), in double: in kSumBlocks blocks of consecutive i, each summed
// in order on one of the OpenMP threads and then added in block order, when `work` is at least
// kParallelMin; else in order on the calling thread (without the region's cost; see parallel_for).
// The blocks come from n alone, so the sum is the same bits on any count of threads (an OpenMP
// reduction's per-thread partial sums would make it depend on the count).
constexpr int64_t kSumBlocks = 64;

template <typename Term>
inline double parallel_sum(int64_t n, int64_t work, const Term& term) {
  double total = 0.0;
  if (work < kParallelMin) {
    for (int64_t i = 0; i < n; ++i) total += term(i);
    return total;
  }
  double partial[kSumBlocks];
  const int64_t size = (n + kSumBlocks - 1) / kSumBlocks;
#pragma omp parallel for num_threads(region_threads())
  for (int64_t b = 0; b < kSumBlocks; ++b) {
    double sum = 0.0;
    const int64_t end = n < (b + 1) * size ? n : (b + 1) * size;
    for (int64_t i = b * size; i < end; ++i) sum += term(i);
    partial[b] = sum;
  }
  for (int64_t b = 0; b < kSumBlocks; ++b) total += partial[b];
  return total;
}
}  // namespace gpumat::host
