// Parallel loops for the host kernels, on gpumat's own thread pool (thread_pool.cpp says why not
// OpenMP's). Loops below kParallelMin elements run on the calling thread: handing them out costs
// more than the work.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gpumat::host {
constexpr int64_t kParallelMin = 1 << 15;

// The threads of every parallel loop of the host kernels: gpumat::ops::set_num_threads's count
// (with GPUMAT_DYNAMIC_THREADS=1, lowered to the cores other processes leave free: parallel.cpp).
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

// fn(ctx, t, slot) for every t in [0, tasks), on the calling thread and up to threads - 1 of the
// pool's (thread_pool.cpp), each taking the next t from a shared counter; `slot` in [0, threads)
// is the running thread's own (0: the caller), so that each may own one slot of scratch. A call
// made while the pool runs another caller's job, or from inside a task, runs its tasks in order
// on the calling thread, slot 0. Tasks must not throw.
using PoolTask = void (*)(const void* ctx, int64_t task, int slot);
void run_on_pool(int64_t tasks, int threads, PoolTask fn, const void* ctx);

// body(t, slot) for every t in [0, tasks) on `threads` threads (run_on_pool); with threads <= 1,
// in order on the calling thread, slot 0.
template <typename Body>
inline void run_slotted(int64_t tasks, int threads, const Body& body) {
  if (threads <= 1 || tasks <= 1) {
    for (int64_t t = 0; t < tasks; ++t) body(t, 0);
    return;
  }
  run_on_pool(
      tasks, threads, [](const void* ctx, int64_t t, int slot) { (*static_cast<const Body*>(ctx))(t, slot); },
      &body);
}

// The threads for `tasks` tasks: the region's count, at most one per task.
inline int task_threads(int64_t tasks) {
  return static_cast<int>(std::min<int64_t>(region_threads(), tasks));
}

// body(t) for every t in [0, tasks): on the pool's threads (run_slotted) when `split`, else in
// order on the calling thread.
template <typename Body>
inline void run_tasks(int64_t tasks, bool split, const Body& body) {
  run_slotted(tasks, split ? task_threads(tasks) : 1, [&](int64_t t, int) { body(t); });
}

// body(i) for every i in [0, n): split into consecutive ranges across the threads (a few ranges
// a thread, taken as they come free) when `work` (the elements the loop touches) is at least
// kParallelMin, else a plain loop on the calling thread, in order.
template <typename Body>
inline void parallel_for(int64_t n, int64_t work, const Body& body) {
  const int threads = work < kParallelMin ? 1 : region_threads();
  if (threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  const int64_t ranges = std::min<int64_t>(n, int64_t{4} * threads), size = (n + ranges - 1) / ranges;
  run_slotted((n + size - 1) / size, threads, [&](int64_t r, int) {
    const int64_t end = std::min(n, (r + 1) * size);
    for (int64_t i = r * size; i < end; ++i) body(i);
  });
}

// Loops in blocks: body(lo, hi) for consecutive ranges covering [0, n), on the threads when n is
// at least kParallelMin, else one call on the calling thread. For a body that is a
// function of its own (a SIMD loop, GPUMAT_SIMD_CLONES) rather than one element's work.
constexpr int64_t kBlockElems = 1 << 14;
template <typename Body>
inline void parallel_blocks(int64_t n, const Body& body) {
  if (n < kParallelMin) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  const int64_t blocks = (n + kBlockElems - 1) / kBlockElems;
  run_slotted(blocks, region_threads(),
              [&](int64_t b, int) { body(b * kBlockElems, std::min(n, (b + 1) * kBlockElems)); });
}

// Loops in blocks over several arrays at once (a multi-tensor optimizer step): body(t, lo, hi) for
// consecutive ranges covering [0, sizes[t]) of every t in [0, count), all in one parallel loop
// when the arrays hold at least kParallelMin elements together (one loop, not one per tensor: a
// step of a small network has many small tensors), else in order on the calling thread.
template <typename Body>
inline void parallel_blocks_multi(const int64_t* sizes, int count, const Body& body) {
  int64_t total = 0;
  for (int t = 0; t < count; ++t) total += sizes[t];
  if (total < kParallelMin) {
    for (int t = 0; t < count; ++t)
      if (sizes[t] > 0) body(t, int64_t{0}, sizes[t]);
    return;
  }
  // first[t]: the index of tensor t's first block among all the tensors' blocks
  std::vector<int64_t> first(static_cast<size_t>(count) + 1, 0);
  for (int t = 0; t < count; ++t) first[t + 1] = first[t] + (sizes[t] + kBlockElems - 1) / kBlockElems;
  run_slotted(first[count], region_threads(), [&](int64_t g, int) {
    const int t = static_cast<int>(std::upper_bound(first.begin(), first.end(), g) - first.begin()) - 1;
    const int64_t b = g - first[t];
    body(t, b * kBlockElems, std::min(sizes[t], (b + 1) * kBlockElems));
  });
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
// in order on one of the threads and then added in block order, when `work` is at least
// kParallelMin; else in order on the calling thread. The blocks come from n alone, so the sum is
// the same bits on any count of threads (per-thread partial sums would make it depend on the
// count).
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
  run_slotted(kSumBlocks, region_threads(), [&](int64_t b, int) {
    double sum = 0.0;
    const int64_t end = n < (b + 1) * size ? n : (b + 1) * size;
    for (int64_t i = b * size; i < end; ++i) sum += term(i);
    partial[b] = sum;
  });
  for (int64_t b = 0; b < kSumBlocks; ++b) total += partial[b];
  return total;
}
}  // namespace gpumat::host
