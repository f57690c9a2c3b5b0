// The host kernels' thread count (gpumat::ops::get_num_threads / set_num_threads): one number for
// the OpenMP regions (parallel.h's region_threads) and OpenBLAS's own pool.
#include "parallel.h"

#include <cblas.h>

#include <atomic>
#include <string>

#include "gpumat/error.h"
#include "gpumat/ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace gpumat {
namespace {
int default_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();  // OMP_NUM_THREADS, else the cores
#else
  return 1;
#endif
}

std::atomic<int>& threads() {
  static std::atomic<int> count{default_threads()};
  return count;
}
}  // namespace

int host::region_threads() { return threads().load(std::memory_order_relaxed); }

int ops::get_num_threads() { return threads().load(); }

void ops::set_num_threads(int n) {
  if (n < 1)
    throw ShapeError("set_num_threads: the thread count must be at least 1, got " + std::to_string(n));
  threads().store(n);
  scipy_openblas_set_num_threads(n);
}
}  // namespace gpumat
