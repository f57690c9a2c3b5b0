// The host kernels' thread count (gpumat::ops::get_num_threads / set_num_threads): one number for
// every parallel loop (parallel.h's region_threads, run on thread_pool.cpp's threads), matrix
// products included (the BLAS runs single-threaded inside them: matmul.cpp), and, when
// GPUMAT_DYNAMIC_THREADS=1, lowered while other processes keep cores busy.
//
// Why lower it: a parallel region ends when its slowest thread does, and a thread that shares its
// core with another process runs a fraction of the time. So a region may use at most the cores
// the other processes leave free: the CPUs online less the runnable threads of other processes,
// Linux's /proc/stat `procs_running` less this process's own runnable threads
// (/proc/self/task/*/stat), sampled at most every 50 ms (about 40 us a sample); MKL's MKL_DYNAMIC
// follows the same idea. Results do not depend on the count (products are cut by shape, sums
// added in fixed blocks), so the load changes the speed, never the bits.
#include "parallel.h"

#include <cblas.h>
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  // the same rule without libgomp: OMP_NUM_THREADS's first number, else the CPUs online
  const char* v = std::getenv("OMP_NUM_THREADS");
  const long n = v != nullptr ? std::strtol(v, nullptr, 10) : 0;
  return n > 0 && n < (1L << 20) ? static_cast<int>(n) : static_cast<int>(host::cpus_online());
#endif
}

std::atomic<int>& max_threads() {
  static std::atomic<int> count{default_threads()};
  return count;
}

// GPUMAT_DYNAMIC_THREADS=1 (read once): follow the load.
bool dynamic_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("GPUMAT_DYNAMIC_THREADS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

// The runnable threads of the whole system (/proc/stat's procs_running), or -1 without /proc.
int procs_running() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return -1;
  char line[256];
  int n = -1;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "procs_running %d", &n) == 1) break;
  std::fclose(f);
  return n;
}

// This process's runnable threads (state R in /proc/self/task/<tid>/stat; the caller is one).
int own_running() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 1;
  int n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + entry->d_name + "/stat";
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;  // the thread ended
    char buf[512];
    const size_t len = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[len] = '\0';
    const char* paren = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
    if (paren != nullptr && paren[1] == ' ' && paren[2] == 'R') ++n;
  }
  closedir(dir);
  return n > 0 ? n : 1;
}

// The cores the other processes leave free (1 to the CPUs online), sampled at most every 50 ms;
// the CPUs online when the sample cannot be taken.
int free_cores() {
  static const int online = [] {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }();
  static std::atomic<int> cached{online};
  static std::atomic<int64_t> sampled_ns{0};
  constexpr int64_t kPeriodNs = 50'000'000;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = sampled_ns.load(std::memory_order_relaxed);
  // One caller takes each sample; the others use the last one meanwhile.
  if (now - last >= kPeriodNs && sampled_ns.compare_exchange_strong(last, now)) {
    const int all = procs_running();
    int free = online;
    if (all >= 0) {
      const int others = all - own_running();
      free = others > 0 ? online - others : online;
      free = free < 1 ? 1 : free;
    }
    cached.store(free, std::memory_order_relaxed);
  }
  return cached.load(std::memory_order_relaxed);
}
}  // namespace

int host::region_threads() {
  const int n = max_threads().load(std::memory_order_relaxed);
  if (n == 1 || !dynamic_enabled()) return n;
  const int free = free_cores();
  return free < n ? free : n;
}

namespace {
// OpenBLAS runs single-threaded inside the parallel loops (matmul.cpp says why); its count is
// process-wide, set once when the library loads.
[[maybe_unused]] const bool blas_single_threaded = [] {
  scipy_openblas_set_num_threads(1);
  return true;
}();
}  // namespace

int ops::get_num_threads() { return max_threads().load(); }

int ops::effective_num_threads() { return host::region_threads(); }

void ops::set_num_threads(int n) {
  if (n < 1)
    throw ShapeError("set_num_threads: the thread count must be at least 1, got " + std::to_string(n));
  max_threads().store(n);
}
}  // namespace gpumat
