// The host kernels' thread pool (parallel.h's run_on_pool): gpumat's own threads, not OpenMP's.
//
// Why not OpenMP: between two parallel regions a libgomp worker either spins with `pause`, holding
// its core against other processes (libgomp's default, ~4 ms), or sleeps in a futex and costs a
// wake-up of 50-80 us at the next region (gpumat's GOMP_SPINCOUNT=2000 slept after ~26 us), and
// whichever libgomp loaded first (PyTorch's own copy, say) decides for every library in the
// process. A worker here waits for the next job in three phases: a short `pause` spin, then
// sched_yield() until kYieldWait has passed since its last job (it stays awake through a
// training step's gaps between products, yet any other runnable thread on its core runs first),
// then a sleep on a condition variable. Measured against OpenMP, alone, after PyTorch and beside a
// busy process: benchmarks/README.md, "gpumat's own thread pool".
//
// One job at a time: a job is a task count and a function; the caller (slot 0) and up to
// `threads - 1` workers take tasks from one atomic counter. A caller that finds the pool busy (a
// second Python thread) or that is itself running a task (a nested loop) runs the tasks alone, in
// order: results never depend on which threads ran the tasks (parallel.h's callers cut work by
// shape), so this changes only the speed.
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <system_error>
#include <thread>

#include "parallel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GPUMAT_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define GPUMAT_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define GPUMAT_CPU_RELAX() ((void)0)
#endif

namespace gpumat::host {
namespace {

constexpr int kSpins = 2000;  // `pause`s before yielding (~26 us on the machine of benchmarks/)
constexpr auto kYieldWait = std::chrono::microseconds(2000);
constexpr int kMaxWorkers = 255;  // the slots a job's state word holds (8 bits), besides the caller

// The pool's state word: the job's number (bits 32..63), whether it is closed to new workers (bit
// 31), how many workers it takes (bits 8..15) and how many joined it (bits 0..7). One word, so
// that a worker joins a job with one compare-exchange that fails once the caller has closed it:
// the caller then waits for exactly the workers that joined, and its job (on its stack) outlives
// their use of it.
constexpr uint64_t kClosed = uint64_t{1} << 31;
uint64_t job_number(uint64_t state) { return state >> 32; }
int joined_of(uint64_t state) { return static_cast<int>(state & 0xff); }
int wanted_of(uint64_t state) { return static_cast<int>((state >> 8) & 0xff); }

struct Job {
  PoolTask fn;
  const void* ctx;
  int64_t tasks;
  std::atomic<int64_t> next{0};
  std::atomic<int> finished{0};  // workers done with it
};

thread_local bool in_task = false;  // the thread is running a job's task (a nested call runs alone)

// noexcept: a task that throws ends the process (as it did in an OpenMP region), never leaves a job
// open with workers using the caller's unwound stack.
void run_tasks_of(Job& job, int slot) noexcept {
  in_task = true;
  for (int64_t t; (t = job.next.fetch_add(1, std::memory_order_relaxed)) < job.tasks;)
    job.fn(job.ctx, t, slot);
  in_task = false;
}

class Pool {
 public:
  void run(PoolTask fn, const void* ctx, int64_t tasks, int threads) {
    std::unique_lock<std::mutex> busy(run_mutex_, std::try_to_lock);
    if (!busy.owns_lock()) {  // another thread's job is running: alone, in order
      run_alone(fn, ctx, tasks);
      return;
    }
    threads = std::min({threads, kMaxWorkers + 1, start_workers(threads - 1) + 1});
    if (threads <= 1) {  // no thread could be started
      run_alone(fn, ctx, tasks);
      return;
    }
    // More threads than CPUs: a waiting worker would only delay one with work, so none waits
    // awake (OMP_WAIT_POLICY=PASSIVE's rule).
    stay_awake_.store(threads <= cpus_online(), std::memory_order_relaxed);
    Job job{fn, ctx, tasks};
    job_.store(&job, std::memory_order_relaxed);
    const uint64_t number = job_number(state_.load(std::memory_order_relaxed)) + 1;
    // published (job_ before it)
    state_.store(number << 32 | static_cast<uint64_t>(threads - 1) << 8, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      {
        std::lock_guard<std::mutex> lock(sleep_mutex_);
      }
      wake_.notify_all();
    }
    run_tasks_of(job, 0);
    // Closed: a worker that has not joined yet no longer can. Wait for those that did.
    const uint64_t closed = state_.fetch_or(kClosed, std::memory_order_acq_rel);
    const int joined = joined_of(closed);
    for (int spins = 0; job.finished.load(std::memory_order_acquire) < joined; ++spins) {
      if (spins < kSpins)
        GPUMAT_CPU_RELAX();
      else
        sched_yield();
    }
  }

 private:
  static void run_alone(PoolTask fn, const void* ctx, int64_t tasks) {
    for (int64_t t = 0; t < tasks; ++t) fn(ctx, t, 0);
  }

  // At least `want` workers if the system lets them start; returns how many there are.
  int start_workers(int want) {
    while (workers_ < want) {
      try {
        std::thread(&Pool::work, this, job_number(state_.load())).detach();
      } catch (const std::system_error&) {  // out of threads or memory: fewer threads, same results
        break;
      }
      ++workers_;
    }
    return workers_;
  }

  // A worker: waits for each job after `seen`, joins it while it is open and short of workers.
  void work(uint64_t seen) {
    // Signals go to the other threads (Python's handlers run on its main thread anyway).
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
      uint64_t current = wait_for_job_after(seen);
      seen = job_number(current);
      // join: one more worker on this job, unless it is closed, full or already replaced
      while (job_number(current) == seen && (current & kClosed) == 0 &&
             joined_of(current) < wanted_of(current)) {
        if (state_.compare_exchange_weak(current, current + 1, std::memory_order_acq_rel)) {
          Job& job = *job_.load(std::memory_order_acquire);  // its caller waits for this worker
          run_tasks_of(job, joined_of(current) + 1);
          job.finished.fetch_add(1, std::memory_order_release);  // the last use of job
          break;
        }
      }
    }
  }

  // The state word once it holds a job numbered after `seen` (open or not).
  uint64_t wait_for_job_after(uint64_t seen) {
    auto fresh = [&](uint64_t s) { return job_number(s) != seen; };
    uint64_t s;
    if (stay_awake_.load(std::memory_order_relaxed)) {
      for (int i = 0; i < kSpins; ++i) {
        if (fresh(s = state_.load(std::memory_order_acquire))) return s;
        GPUMAT_CPU_RELAX();
      }
      const auto since = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - since < kYieldWait) {
        if (fresh(s = state_.load(std::memory_order_acquire))) return s;
        sched_yield();
      }
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      wake_.wait(lock, [&] { return fresh(s = state_.load(std::memory_order_seq_cst)); });
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return s;
  }

  std::mutex run_mutex_;  // one job at a time
  std::atomic<uint64_t> state_{0};
  std::atomic<Job*> job_{nullptr};
  int workers_ = 0;  // under run_mutex_
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stay_awake_{true};  // the last job had no more threads than CPUs

 public:
  Pool* before_fork = nullptr;  // a parent's pool, kept reachable in a child (see new_pool)
};

Pool* new_pool();

// The pool, made when the library loads (its workers start at the first parallel loop). A child
// made by fork() has none of its parent's threads (only the forking one): it starts a pool of its
// own, and the parent's is left alone.
std::atomic<Pool*> the_pool{new_pool()};

Pool* new_pool() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] {
      Pool* fresh = new Pool;
      fresh->before_fork = the_pool.load(std::memory_order_relaxed);
      the_pool.store(fresh, std::memory_order_relaxed);
    });
    return true;
  }();
  (void)registered;
  return new Pool;
}
}  // namespace

void run_on_pool(int64_t tasks, int threads, PoolTask fn, const void* ctx) {
  if (threads <= 1 || tasks <= 1 || in_task) {
    for (int64_t t = 0; t < tasks; ++t) fn(ctx, t, 0);
    return;
  }
  the_pool.load(std::memory_order_relaxed)
      ->run(fn, ctx, tasks, static_cast<int>(std::min<int64_t>(threads, tasks)));
}
}  // namespace gpumat::host
