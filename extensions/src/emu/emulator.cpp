// The CUDA emulator's engine (execution model in emulator.h): fibers and their context switch, the
// seeded block scheduler with block and warp barriers, and the runtime API of cuda_runtime.h
// (device memory, copies, streams, events, device properties, errors) mapped onto the host.
#include "emulator.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define GPUMAT_EMU_ASAN 1
#endif

// Built-in variables of the running emulated thread (declared in cuda_runtime.h).
__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread uint3 blockDim;
__thread uint3 gridDim;

namespace gpumat::emulator {
namespace {

// ============================================================================ configuration

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 0);
  return (end != nullptr && *end == '\0') ? static_cast<uint64_t>(x) : fallback;
}

uint64_t schedule_seed() {
  static const uint64_t seed = env_u64("GPUMAT_EMU_SEED", 1);
  return seed;
}
size_t memory_capacity() {
  static const size_t bytes = static_cast<size_t>(env_u64("GPUMAT_EMU_MEMORY_BYTES", size_t{8} << 30));
  return bytes;
}
int device_count() {
  static const int n =
      static_cast<int>(std::min<uint64_t>(std::max<uint64_t>(env_u64("GPUMAT_EMU_DEVICES", 1), 1), 8));
  return n;
}

// The GPU this device pretends to be for the properties that steer kernel choices (an H100 SXM):
// launch heuristics then pick on the emulator what they would pick on that GPU.
constexpr int kSMs = 132;
constexpr size_t kSmemPerBlock = 48 * 1024, kSmemOptin = 227 * 1024;
constexpr unsigned kMaxThreads = 1024, kMaxBlockXY = 1024, kMaxBlockZ = 64;
constexpr unsigned kMaxGridX = 2147483647u, kMaxGridYZ = 65535;

// The grid.y and grid.z limits this device enforces and reports: a GPU's 65,535, or less when
// GPUMAT_EMU_MAX_GRID_Y / GPUMAT_EMU_MAX_GRID_Z is set (clamped to [1, 65535]). Lowering them lets a
// test reach the code a GPU runs only past 65,535 row tiles (millions of rows) with small arrays.
// Read at every launch and property query, not once, so one test process can lower and restore
// them (os.environ in Python calls setenv).
unsigned max_grid_dim(const char* env) {
  return static_cast<unsigned>(std::clamp<uint64_t>(env_u64(env, kMaxGridYZ), 1, kMaxGridYZ));
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; s != nullptr && *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}

// ============================================================================ errors

// As in CUDA, the last error is per host thread.
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local std::string t_last_detail;

cudaError_t fail(cudaError_t err, std::string detail) {
  t_last_error = err;
  t_last_detail = std::move(detail);
  return err;
}

// ============================================================================ fibers
// A fiber is one emulated CUDA thread: a stack and a saved context. On x86-64 the switch saves the
// callee-saved registers and the floating-point control words and swaps stack pointers (a few
// instructions); elsewhere, or with GPUMAT_EMU_FIBERS=ucontext, it is swapcontext (portable, but
// a system call per switch for the signal mask).

#if defined(__x86_64__)
extern "C" void gpumat_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl gpumat_emu_switch
  .hidden gpumat_emu_switch
  .type gpumat_emu_switch, @function
gpumat_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gpumat_emu_switch, .-gpumat_emu_switch
)");
constexpr bool kHaveAsmSwitch = true;
#else
constexpr bool kHaveAsmSwitch = false;
#endif

bool use_asm_switch() {
  static const bool on = [] {
    const char* v = std::getenv("GPUMAT_EMU_FIBERS");
    return kHaveAsmSwitch && !(v != nullptr && std::strcmp(v, "ucontext") == 0);
  }();
  return on;
}

struct Context {
  void* sp = nullptr;  // asm switch
  ucontext_t uc;       // ucontext switch
};

#ifdef GPUMAT_EMU_ASAN
constexpr size_t kStackBytes = 512 * 1024;  // ASan's redzones make frames several times larger
#else
constexpr size_t kStackBytes = 64 * 1024;
#endif

enum class State : uint8_t { Ready, BlockBarrier, WarpBarrier, Done };

struct PendingCopy {
  void* dst;
  const void* src;
  size_t bytes, src_bytes;
  int group;
};

struct Fiber {
  Context ctx;
  char* stack_lo = nullptr;  // lowest usable address (a guard page lies below)
  uint3 tid{};
  int linear = 0, warp = 0, lane = 0;
  State state = State::Ready;
  // the collective this fiber waits in
  WarpOp op = WarpOp::Sync;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int src = -1;
  int pred = 0;
  // cp.async
  std::vector<PendingCopy> copies;
  int committed = 0;
  void* fake_stack = nullptr;  // ASan's bookkeeping across switches
};

struct Launch {
  const char* name;
  Dim grid, block;
  size_t smem;
  ThreadBody body;
  void* ctx;
  uint64_t geometry_hash;
  std::atomic<bool> faulted{false};
  std::mutex fault_mutex;
  uint64_t fault_block = UINT64_MAX;
  std::string fault_msg;

  void record_fault(uint64_t block, const std::string& msg) {
    std::lock_guard<std::mutex> lock(fault_mutex);
    if (block < fault_block) {  // the lowest block's report: the same whichever worker ran first
      fault_block = block;
      fault_msg = msg;
    }
    faulted = true;
  }
};

// One OS thread's emulation state: its fibers (reused block after block) and the scheduler context.
struct Worker {
  Context sched;
  std::vector<Fiber> fibers;
  char* stacks = nullptr;
  size_t stacks_bytes = 0;
  size_t stride = 0;
  std::vector<unsigned char> smem;  // dynamic shared memory of the running block
  Fiber* current = nullptr;
  Launch* launch = nullptr;
  bool fault = false;
  std::string fault_msg;
  int nthreads = 0;
  int at_block_barrier = 0;
  std::vector<int> next;  // fibers released during this round
#ifdef GPUMAT_EMU_ASAN
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif

  ~Worker() {
    if (stacks != nullptr) munmap(stacks, stacks_bytes);
  }

  void ensure_fibers(int n) {
    if (static_cast<int>(fibers.size()) >= n) return;
    if (stacks != nullptr) munmap(stacks, stacks_bytes);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    stride = kStackBytes + page;
    stacks_bytes = stride * static_cast<size_t>(n);
    void* p = mmap(nullptr, stacks_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      stacks = nullptr;
      fibers.clear();
      throw std::bad_alloc();
    }
    stacks = static_cast<char*>(p);
    fibers.clear();
    fibers.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      char* base = stacks + stride * static_cast<size_t>(i);
      mprotect(base, page, PROT_NONE);  // guard page: a stack overflow faults instead of corrupting
      fibers[static_cast<size_t>(i)].stack_lo = base + page;
    }
  }
};

thread_local Worker* t_worker = nullptr;

Worker& worker() {
  if (t_worker == nullptr) t_worker = new Worker();  // lives as long as its thread (OpenMP pools)
  return *t_worker;
}

void fiber_start();

void init_context(Fiber& f) {
#ifdef GPUMAT_EMU_ASAN
  // The frames of the previous fiber's way out (fiber_start, fiber_main, yield) never returned, so
  // their redzones are still poisoned; kernel frames below them returned and cleaned up after
  // themselves.
  constexpr size_t kExitFrames = 32 * 1024;
  ASAN_UNPOISON_MEMORY_REGION(f.stack_lo + kStackBytes - kExitFrames, kExitFrames);
#endif
  if (use_asm_switch()) {
#if defined(__x86_64__)
    uintptr_t top = reinterpret_cast<uintptr_t>(f.stack_lo + kStackBytes) & ~uintptr_t{15};
    uint64_t* sp = reinterpret_cast<uint64_t*>(top);
    *--sp = 0;  // fake return address of fiber_start: keeps the ABI's 16-byte alignment
    *--sp = reinterpret_cast<uint64_t>(&fiber_start);  // where the first switch's `ret` goes
    for (int i = 0; i < 6; ++i) *--sp = 0;             // rbp rbx r12 r13 r14 r15
    uint32_t mxcsr;
    uint16_t fcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    *--sp = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fcw) << 32);
    f.ctx.sp = sp;
#endif
  } else {
    getcontext(&f.ctx.uc);
    f.ctx.uc.uc_stack.ss_sp = f.stack_lo;
    f.ctx.uc.uc_stack.ss_size = kStackBytes;
    f.ctx.uc.uc_link = nullptr;
    makecontext(&f.ctx.uc, fiber_start, 0);
  }
}

void raw_switch(Context& from, Context& to) {
#if defined(__x86_64__)
  if (use_asm_switch()) {
    gpumat_emu_switch(&from.sp, to.sp);
    return;
  }
#endif
  swapcontext(&from.uc, &to.uc);
}

// Scheduler -> fiber f; returns when f blocks or ends.
void resume(Worker& w, Fiber& f) {
  w.current = &f;
  threadIdx = f.tid;
#ifdef GPUMAT_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack_lo, kStackBytes);
  raw_switch(w.sched, f.ctx);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  raw_switch(w.sched, f.ctx);
#endif
  w.current = nullptr;
}

// Fiber -> scheduler. `dying`: the fiber never resumes.
void yield(Worker& w, Fiber& f, bool dying) {
#ifdef GPUMAT_EMU_ASAN
  __sanitizer_start_switch_fiber(dying ? nullptr : &f.fake_stack, w.sched_bottom, w.sched_size);
  raw_switch(f.ctx, w.sched);
  __sanitizer_finish_switch_fiber(f.fake_stack, &w.sched_bottom, &w.sched_size);
#else
  (void)dying;
  raw_switch(f.ctx, w.sched);
#endif
}

std::string where(const Worker& w, const Fiber* f) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "kernel %s, block (%u, %u, %u)", w.launch ? w.launch->name : "?", blockIdx.x,
                blockIdx.y, blockIdx.z);
  std::string s = buf;
  if (f != nullptr) {
    std::snprintf(buf, sizeof buf, ", thread (%u, %u, %u)", f->tid.x, f->tid.y, f->tid.z);
    s += buf;
  }
  return s;
}

// Marks the block faulted; the scheduler abandons it after the running fiber yields.
void block_fault(Worker& w, const std::string& msg) {
  if (!w.fault) {
    w.fault = true;
    w.fault_msg = msg;
  }
}

// Runs one emulated thread to its end, then leaves for good.
void fiber_main() {
  Worker& w = worker();
  Fiber& f = *w.current;
  try {
    w.launch->body(w.launch->ctx);
  } catch (const std::exception& e) {
    block_fault(w, where(w, &f) + ": exception in the kernel: " + e.what());
  } catch (...) {
    block_fault(w, where(w, &f) + ": exception in the kernel");
  }
  if (!f.copies.empty() && !w.fault)
    block_fault(w, where(w, &f) + ": the thread ended with cp.async copies that no cp_async_wait delivered");
  f.state = State::Done;
  yield(w, f, /*dying=*/true);
  std::abort();  // unreachable: a finished fiber is never resumed
}

// A fiber's first instruction (entered by the first switch, never called). ASan must learn that it
// runs on a new stack before anything else: the compiler puts __asan_handle_no_return, which reads
// the stack bounds, before the call of the never-returning fiber_main.
void fiber_start() {
#ifdef GPUMAT_EMU_ASAN
  Worker& w = worker();
  __sanitizer_finish_switch_fiber(nullptr, &w.sched_bottom, &w.sched_size);
#endif
  fiber_main();
}

Fiber& running_fiber(const char* what) {
  Worker* w = t_worker;
  if (w == nullptr || w->current == nullptr) {
    std::fprintf(stderr, "gpumat emulator: %s called outside a kernel\n", what);
    std::abort();
  }
  return *w->current;
}

// ---------------------------------------------------------------------------- warp collectives

void release(Worker& w, Fiber& f) {
  f.state = State::Ready;
  w.next.push_back(f.linear);
}

// Called when fiber `f` arrives at a warp collective: releases its group if every lane it names
// has arrived with the same collective and mask.
void try_release_warp(Worker& w, Fiber& f) {
  const int base = f.warp * 32;
  const unsigned mask = f.mask;
  if ((mask >> f.lane & 1u) == 0) {
    block_fault(w, where(w, &f) + ": warp collective with a mask that does not include the calling lane");
    return;
  }
  for (int l = 0; l < 32; ++l) {
    if ((mask >> l & 1u) == 0) continue;
    if (base + l >= w.nthreads) {
      block_fault(w, where(w, &f) + ": warp collective mask names lane " + std::to_string(l) +
                         ", which does not exist in this block");
      return;
    }
    const Fiber& o = w.fibers[static_cast<size_t>(base + l)];
    if (o.state == State::Done) {
      block_fault(w, where(w, &f) + ": warp collective mask names lane " + std::to_string(l) +
                         ", which has already exited");
      return;
    }
    if (o.state != State::WarpBarrier) return;  // not there yet
  }
  for (int l = 0; l < 32; ++l) {
    if ((mask >> l & 1u) == 0) continue;
    const Fiber& o = w.fibers[static_cast<size_t>(base + l)];
    if (o.op != f.op || o.mask != mask) {
      block_fault(w, where(w, &f) + ": lanes of a warp reached different warp collectives or masks");
      return;
    }
  }
  uint64_t ballot = 0;
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && w.fibers[static_cast<size_t>(base + l)].value != 0) ballot |= uint64_t{1} << l;
  for (int l = 0; l < 32; ++l) {
    if ((mask >> l & 1u) == 0) continue;
    Fiber& o = w.fibers[static_cast<size_t>(base + l)];
    if (f.op == WarpOp::Shuffle) {
      const int s = o.src - base;
      // NOTE: reading a lane outside the mask is undefined on a GPU: poison (NaN for floats).
      o.result =
          (s >= 0 && s < 32 && (mask >> s & 1u)) ? w.fibers[static_cast<size_t>(o.src)].value : ~uint64_t{0};
    } else {
      o.result = ballot;
    }
    release(w, o);
  }
}

// A fiber ended: lanes waiting in a collective that names it can never be released.
void check_waiters_after_exit(Worker& w, const Fiber& f) {
  const int base = f.warp * 32;
  for (int l = 0; l < 32 && base + l < w.nthreads; ++l) {
    const Fiber& o = w.fibers[static_cast<size_t>(base + l)];
    if (o.state == State::WarpBarrier && (o.mask >> f.lane & 1u)) {
      block_fault(w, where(w, &o) + ": warp collective mask names lane " + std::to_string(f.lane) +
                         ", which exited without reaching it");
      return;
    }
  }
}

// ---------------------------------------------------------------------------- blocks

void run_block(Launch& L, uint64_t linear) {
  Worker& w = worker();
  const Dim g = L.grid, b = L.block;
  blockIdx = uint3{static_cast<unsigned>(linear % g.x), static_cast<unsigned>((linear / g.x) % g.y),
                   static_cast<unsigned>(linear / (static_cast<uint64_t>(g.x) * g.y))};
  blockDim = uint3{b.x, b.y, b.z};
  gridDim = uint3{g.x, g.y, g.z};
  const int n = static_cast<int>(b.x * b.y * b.z);
  w.ensure_fibers(n);
  w.launch = &L;
  w.fault = false;
  w.fault_msg.clear();
  w.nthreads = n;
  w.at_block_barrier = 0;
  if (L.smem > 0) {
    w.smem.resize(L.smem + 16);
    std::memset(w.smem.data(), 0xFF, w.smem.size());  // NaN: a read before any write shows
  }
  for (int i = 0; i < n; ++i) {
    Fiber& f = w.fibers[static_cast<size_t>(i)];
    f.tid = uint3{static_cast<unsigned>(i) % b.x, (static_cast<unsigned>(i) / b.x) % b.y,
                  static_cast<unsigned>(i) / (b.x * b.y)};
    f.linear = i;
    f.warp = i / 32;
    f.lane = i % 32;
    f.state = State::Ready;
    f.copies.clear();
    f.committed = 0;
    init_context(f);
  }
  uint64_t rng = splitmix64(schedule_seed() ^ L.geometry_hash ^ splitmix64(linear));
  auto next_random = [&rng] {
    rng = splitmix64(rng);
    return rng;
  };
  std::vector<int> ready(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ready[static_cast<size_t>(i)] = i;
  int done = 0;
  while (!ready.empty() && !w.fault) {
    for (size_t i = ready.size(); i > 1; --i)
      std::swap(ready[i - 1], ready[next_random() % i]);  // Fisher-Yates
    w.next.clear();
    for (int idx : ready) {
      Fiber& f = w.fibers[static_cast<size_t>(idx)];
      resume(w, f);
      if (w.fault) break;
      if (f.state == State::Done) {
        ++done;
        check_waiters_after_exit(w, f);
      } else if (f.state == State::BlockBarrier) {
        if (++w.at_block_barrier == n) {
          int count = 0;
          for (int i = 0; i < n; ++i) count += w.fibers[static_cast<size_t>(i)].pred != 0;
          for (int i = 0; i < n; ++i) {
            w.fibers[static_cast<size_t>(i)].result = static_cast<uint64_t>(count);
            release(w, w.fibers[static_cast<size_t>(i)]);
          }
          w.at_block_barrier = 0;
        }
      } else if (f.state == State::WarpBarrier) {
        try_release_warp(w, f);
      }
      if (w.fault) break;
    }
    ready.swap(w.next);
  }
  if (!w.fault && done != n) {
    int at_warp = 0;
    for (int i = 0; i < n; ++i) at_warp += w.fibers[static_cast<size_t>(i)].state == State::WarpBarrier;
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        ": deadlock: %d of %d threads wait at __syncthreads(), %d in warp collectives, %d have exited "
        "(a barrier in divergent code is undefined behaviour on a GPU)",
        w.at_block_barrier, n, at_warp, done);
    block_fault(w, where(w, nullptr) + buf);
  }
  if (w.fault) {
#ifdef GPUMAT_EMU_ASAN
    // Abandoned fibers leave poisoned frames behind; the next block reuses these stacks.
    ASAN_UNPOISON_MEMORY_REGION(w.stacks, w.stacks_bytes);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    for (int i = 0; i < n; ++i)
      ASAN_UNPOISON_MEMORY_REGION(w.fibers[static_cast<size_t>(i)].stack_lo, kStackBytes);
    (void)page;
#endif
    L.record_fault(linear, w.fault_msg);
  }
  w.launch = nullptr;
}

#ifdef GPUMAT_EMU_ASAN
// A sanitizer report ends the process; this names the emulated thread that was running.
void on_sanitizer_death() {
  Worker* w = t_worker;
  if (w == nullptr || w->launch == nullptr) return;
  std::fprintf(stderr, "gpumat emulator: the fault above happened in %s\n", where(*w, w->current).c_str());
}
const bool g_death_callback_installed = [] {
  __sanitizer_set_death_callback(on_sanitizer_death);
  return true;
}();
#endif

// ============================================================================ device memory

struct Allocation {
  size_t bytes;
  int dev;
};
std::mutex g_mem_mutex;
std::set<const void*> g_pinned;            // live cudaHostAlloc blocks, under g_mem_mutex
std::map<uintptr_t, Allocation> g_allocs;  // base address -> allocation
size_t g_bytes_in_use[8] = {};

thread_local int t_device = 0;

// The allocation that holds [p, p + bytes), or nullptr.
const Allocation* find_allocation(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  if (a + bytes > it->first + it->second.bytes || a < it->first) return nullptr;
  return &it->second;
}

cudaError_t check_device_range(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  if (find_allocation(p, bytes) != nullptr) return cudaSuccess;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s: [%p, %p + %zu bytes) is not inside one device allocation", what, p, p,
                bytes);
  return fail(cudaErrorInvalidValue, buf);
}

// ============================================================================ streams and events

struct Event {
  std::chrono::steady_clock::time_point t;
  bool recorded = false;
};
std::mutex g_handle_mutex;
std::set<const void*> g_streams, g_events;

bool valid_stream(cudaStream_t s) {
  if (s == nullptr) return true;
  std::lock_guard<std::mutex> lock(g_handle_mutex);
  return g_streams.count(s) != 0;
}

std::map<const void*, int> g_max_dynamic_smem;  // per kernel, set by cudaFuncSetAttribute

std::string config_error(const void* kernel, const char* name, Dim grid, Dim block, size_t dynamic_smem,
                         void* stream, cudaError_t* err);

// ============================================================================ stream capture

// A captured stream's work in issue order; an instantiated graph runs the same closures.
using GraphNodes = std::vector<std::function<int()>>;
struct Capture {
  GraphNodes nodes;
  // Where "potentially unsafe" calls fail: on every thread (cudaStreamCaptureModeGlobal), on the
  // capturing thread only (ThreadLocal), or nowhere (Relaxed).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id owner;    // the thread that began the capture
  std::string invalidated;  // why the capture was invalidated; empty while it is valid
};
std::mutex g_capture_mutex;
std::map<const void*, Capture> g_captures;  // by stream, from BeginCapture to EndCapture
std::set<const void*> g_graphs, g_graph_execs;

// Records `node` on a capturing stream: cudaSuccess, or the capture's invalidation error.
cudaError_t record(void* stream, std::function<int()> node, const char* what) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  Capture& c = g_captures.at(stream);
  if (!c.invalidated.empty())
    return fail(cudaErrorStreamCaptureInvalidated,
                std::string(what) + ": the stream's capture was invalidated by " + c.invalidated);
  c.nodes.push_back(std::move(node));
  return cudaSuccess;
}

void invalidate(void* stream, const std::string& why) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  auto it = g_captures.find(stream);
  if (it != g_captures.end() && it->second.invalidated.empty()) it->second.invalidated = why;
}

// A call that may synchronize (the CUDA runtime's "potentially unsafe API calls"): while a
// global-mode capture runs, or a thread-local one on this thread, it fails and invalidates that
// capture, as on a GPU.
cudaError_t unsafe_during_capture(const char* what) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  bool any = false;
  for (auto& [stream, c] : g_captures) {
    const bool applies =
        c.mode == cudaStreamCaptureModeGlobal ||
        (c.mode == cudaStreamCaptureModeThreadLocal && c.owner == std::this_thread::get_id());
    if (!applies) continue;
    any = true;
    if (c.invalidated.empty()) c.invalidated = what;
  }
  return any ? fail(cudaErrorStreamCaptureUnsupported,
                    std::string(what) + " is not allowed while a stream is being captured into a CUDA graph")
             : cudaSuccess;
}

}  // namespace

bool capturing(void* stream) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  return g_captures.count(stream) != 0;
}

int capture_launch(const void* kernel, const char* name, Dim grid, Dim block, size_t dynamic_smem,
                   void* stream, std::function<int()> replay) {
  cudaError_t err = cudaSuccess;
  const std::string why = config_error(kernel, name, grid, block, dynamic_smem, stream, &err);
  if (!why.empty()) {
    invalidate(stream, why);
    return fail(err, why);
  }
  return record(stream, std::move(replay), name);
}

// ============================================================================ engine API

namespace {

// Why a launch's configuration is invalid (its error code in *err), or "" when it is valid.
std::string config_error(const void* kernel, const char* name, Dim grid, Dim block, size_t dynamic_smem,
                         void* stream, cudaError_t* err) {
  *err = cudaErrorInvalidConfiguration;
  if (!valid_stream(static_cast<cudaStream_t>(stream))) {
    *err = cudaErrorInvalidResourceHandle;
    return std::string("launch of ") + name + ": invalid stream";
  }
  size_t smem_limit = kSmemPerBlock;
  {
    std::lock_guard<std::mutex> lock(g_handle_mutex);
    auto it = g_max_dynamic_smem.find(kernel);
    if (it != g_max_dynamic_smem.end()) smem_limit = static_cast<size_t>(it->second);
  }
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  char why[160] = "";
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
    std::snprintf(why, sizeof why, "a grid or block dimension is 0");
  else if (block.x > kMaxBlockXY || block.y > kMaxBlockXY || block.z > kMaxBlockZ || threads > kMaxThreads)
    std::snprintf(why, sizeof why, "block (%u, %u, %u) exceeds 1024 threads or the per-dimension limits",
                  block.x, block.y, block.z);
  else if (grid.x > kMaxGridX || grid.y > max_grid_dim("GPUMAT_EMU_MAX_GRID_Y") ||
           grid.z > max_grid_dim("GPUMAT_EMU_MAX_GRID_Z"))
    std::snprintf(why, sizeof why, "grid (%u, %u, %u) exceeds the limits (2^31 - 1, %u, %u)", grid.x, grid.y,
                  grid.z, max_grid_dim("GPUMAT_EMU_MAX_GRID_Y"), max_grid_dim("GPUMAT_EMU_MAX_GRID_Z"));
  else if (dynamic_smem > smem_limit)
    std::snprintf(why, sizeof why, "%zu bytes of dynamic shared memory exceed the kernel's limit of %zu",
                  dynamic_smem, smem_limit);
  return why[0] == '\0' ? std::string() : std::string("launch of ") + name + ": " + why;
}

}  // namespace

int launch(const void* kernel, const char* name, Dim grid, Dim block, size_t dynamic_smem, void* stream,
           ThreadBody body, void* ctx) {
  cudaError_t err = cudaSuccess;
  const std::string why = config_error(kernel, name, grid, block, dynamic_smem, stream, &err);
  if (!why.empty()) return fail(err, why);

  Launch L;
  L.name = name;
  L.grid = grid;
  L.block = block;
  L.smem = dynamic_smem;
  L.body = body;
  L.ctx = ctx;
  L.geometry_hash = splitmix64(
      fnv1a(name) ^ splitmix64((uint64_t{grid.x} << 32) ^ grid.y) ^
      splitmix64((uint64_t{grid.z} << 40) ^ (uint64_t{block.x} << 20) ^ (uint64_t{block.y} << 10) ^ block.z));
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  std::atomic<bool> oom{false};
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    if (L.faulted.load(std::memory_order_relaxed) || oom.load(std::memory_order_relaxed)) continue;
    try {
      run_block(L, static_cast<uint64_t>(blk));
    } catch (const std::bad_alloc&) {
      oom = true;
    }
  }
  if (oom)
    return fail(cudaErrorMemoryAllocation, std::string("launch of ") + name + ": no memory for fiber stacks");
  if (L.faulted) return fail(cudaErrorLaunchFailure, L.fault_msg);
  return cudaSuccess;
}

void sync_block() { sync_block_count(0); }

int sync_block_count(int pred) {
  Fiber& f = running_fiber("__syncthreads");
  f.pred = pred;
  f.state = State::BlockBarrier;
  yield(*t_worker, f, false);
  return static_cast<int>(f.result);
}

uint64_t warp_collective(WarpOp kind, unsigned mask, uint64_t value, int src_lane) {
  Fiber& f = running_fiber("a warp intrinsic");
  f.op = kind;
  f.mask = mask;
  f.value = value;
  f.src = src_lane < 0 ? f.linear : f.warp * 32 + src_lane;
  f.state = State::WarpBarrier;
  yield(*t_worker, f, false);
  return f.result;
}

int lane_id() { return running_fiber("lane_id").lane; }

unsigned active_mask() {
  Fiber& f = running_fiber("__activemask");
  Worker& w = *t_worker;
  unsigned m = 0;
  for (int l = 0; l < 32 && f.warp * 32 + l < w.nthreads; ++l)
    if (w.fibers[static_cast<size_t>(f.warp * 32 + l)].state != State::Done) m |= 1u << l;
  return m;
}

void* dynamic_smem() {
  running_fiber("dynamic_smem");
  Worker& w = *t_worker;
  if (w.launch->smem == 0) return nullptr;
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(w.smem.data()) + 15) & ~uintptr_t{15});
}

void cp_async(void* dst, const void* src, size_t bytes, size_t src_bytes) {
  Fiber& f = running_fiber("cp.async");
  f.copies.push_back({dst, src, bytes, src_bytes, f.committed});
}

void cp_async_commit() { ++running_fiber("cp.async.commit_group").committed; }

void cp_async_wait(int pending_groups) {
  Fiber& f = running_fiber("cp.async.wait_group");
  // Groups committed before the newest `pending_groups` ones are delivered; uncommitted copies stay.
  const int deliver_below = f.committed - pending_groups;
  std::vector<PendingCopy> keep;
  for (const PendingCopy& c : f.copies) {
    if (c.group < deliver_below) {
      std::memcpy(c.dst, c.src, c.src_bytes);
      std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);  // zero fill
    } else {
      keep.push_back(c);
    }
  }
  f.copies.swap(keep);
}

void device_fault(const char* what) {
  Fiber& f = running_fiber("device_fault");
  Worker& w = *t_worker;
  block_fault(w, where(w, &f) + ": " + what);
  f.state = State::Done;
  yield(w, f, /*dying=*/true);
  std::abort();
}

}  // namespace gpumat::emulator

// ============================================================================ runtime API

using gpumat::emulator::fail;
namespace emu = gpumat::emulator;

cudaError_t cudaGetLastError() {
  cudaError_t e = emu::t_last_error;
  emu::t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return emu::t_last_error; }

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
  }
  return "cudaErrorUnknown";
}

// The generic text, then (on the emulator) the details of the most recent failure on this thread.
const char* cudaGetErrorString(cudaError_t err) {
  static thread_local std::string text;
  switch (err) {
    case cudaSuccess:
      text = "no error";
      break;
    case cudaErrorInvalidValue:
      text = "invalid argument";
      break;
    case cudaErrorMemoryAllocation:
      text = "out of memory";
      break;
    case cudaErrorInvalidConfiguration:
      text = "invalid configuration argument";
      break;
    case cudaErrorLaunchFailure:
      text = "unspecified launch failure";
      break;
    case cudaErrorInvalidDevice:
      text = "invalid device ordinal";
      break;
    case cudaErrorInvalidResourceHandle:
      text = "invalid resource handle";
      break;
    case cudaErrorIllegalState:
      text = "the operation cannot be performed in the present state";
      break;
    case cudaErrorStreamCaptureUnsupported:
      text = "operation not permitted when stream is capturing";
      break;
    case cudaErrorStreamCaptureInvalidated:
      text = "operation failed due to a previous error during capture";
      break;
    default:
      text = "emulated CUDA error";
      break;
  }
  if (err != cudaSuccess && !emu::t_last_detail.empty()) text += " (emulator: " + emu::t_last_detail + ")";
  return text.c_str();
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emu::device_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) {
  if (dev < 0 || dev >= emu::device_count())
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(dev) + ")");
  emu::t_device = dev;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* dev) {
  *dev = emu::t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int dev) {
  if (dev < 0 || dev >= emu::device_count()) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties");
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "gpumat emulated CUDA device (CPU, H100-shaped)");
  prop->totalGlobalMem = emu::memory_capacity();
  prop->sharedMemPerBlock = emu::kSmemPerBlock;
  prop->sharedMemPerBlockOptin = emu::kSmemOptin;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = static_cast<int>(emu::kMaxThreads);
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = static_cast<int>(emu::kMaxBlockXY);
  prop->maxThreadsDim[2] = static_cast<int>(emu::kMaxBlockZ);
  prop->maxGridSize[0] = static_cast<int>(emu::kMaxGridX);
  prop->maxGridSize[1] = static_cast<int>(emu::max_grid_dim("GPUMAT_EMU_MAX_GRID_Y"));
  prop->maxGridSize[2] = static_cast<int>(emu::max_grid_dim("GPUMAT_EMU_MAX_GRID_Z"));
  prop->clockRate = 1980000;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = emu::kSMs;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryClockRate = 2619000;
  prop->memoryBusWidth = 5120;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxGridDimX:
      *value = p.maxGridSize[0];
      break;
    case cudaDevAttrMaxGridDimY:
      *value = p.maxGridSize[1];
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = p.maxGridSize[2];
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrClockRate:
      *value = p.clockRate;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrMemoryClockRate:
      *value = p.memoryClockRate;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    default:
      return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute not emulated");
  }
  return cudaSuccess;
}

// Launches and copies are synchronous: synchronizing only checks that no capture forbids it.
cudaError_t cudaDeviceSynchronize() { return emu::unsafe_during_capture("cudaDeviceSynchronize"); }
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 0;  // no driver: the emulator is the whole stack
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (cudaError_t e = emu::unsafe_during_capture("cudaMalloc"); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  const int dev = emu::t_device;
  {
    std::lock_guard<std::mutex> lock(emu::g_mem_mutex);
    if (bytes > emu::memory_capacity() - emu::g_bytes_in_use[dev])
      return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: " +
                                                 std::to_string(emu::g_bytes_in_use[dev]) + " of " +
                                                 std::to_string(emu::memory_capacity()) + " bytes in use");
  }
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation, "cudaMalloc: the host is out of memory");
  std::memset(p, 0xFF, rounded);  // NaN: uninitialised device memory reads show
  std::lock_guard<std::mutex> lock(emu::g_mem_mutex);
  emu::g_allocs[reinterpret_cast<uintptr_t>(p)] = {bytes, dev};
  emu::g_bytes_in_use[dev] += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (cudaError_t e = emu::unsafe_during_capture("cudaFree"); e != cudaSuccess) return e;
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(emu::g_mem_mutex);
    auto it = emu::g_allocs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == emu::g_allocs.end())
      return fail(cudaErrorInvalidDevicePointer, "cudaFree of a pointer cudaMalloc did not return");
    emu::g_bytes_in_use[it->second.dev] -= it->second.bytes;
    emu::g_allocs.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  *ptr = nullptr;
  if (cudaError_t e = emu::unsafe_during_capture("cudaHostAlloc"); e != cudaSuccess) return e;
  if (flags != cudaHostAllocDefault) return fail(cudaErrorInvalidValue, "cudaHostAlloc: flags not emulated");
  void* p = std::aligned_alloc(4096, (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc: the host is out of memory");
  std::lock_guard<std::mutex> lock(emu::g_mem_mutex);
  emu::g_pinned.insert(p);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (cudaError_t e = emu::unsafe_during_capture("cudaFreeHost"); e != cudaSuccess) return e;
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(emu::g_mem_mutex);
    if (emu::g_pinned.erase(ptr) == 0)
      return fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaHostAlloc did not return");
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(emu::g_mem_mutex);
  *total_bytes = emu::memory_capacity();
  *free_bytes = *total_bytes - emu::g_bytes_in_use[emu::t_device];
  return cudaSuccess;
}

namespace {
// The copy itself, after checking that device ranges lie inside live allocations.
cudaError_t checked_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice)
    e = emu::check_device_range(dst, bytes, "cudaMemcpy destination");
  if (e == cudaSuccess && (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice))
    e = emu::check_device_range(src, bytes, "cudaMemcpy source");
  if (e != cudaSuccess) return e;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection, "cudaMemcpy");
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t checked_set(void* ptr, int value, size_t bytes) {
  cudaError_t e = emu::check_device_range(ptr, bytes, "cudaMemset");
  if (e != cudaSuccess) return e;
  if (bytes > 0) std::memset(ptr, value, bytes);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = emu::unsafe_during_capture("cudaMemcpy"); e != cudaSuccess) return e;
  return checked_copy(dst, src, bytes, kind);
}

// On a capturing stream the copy is checked now and recorded (as a graph memcpy node).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (!emu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: invalid stream");
  if (!emu::capturing(stream)) return checked_copy(dst, src, bytes, kind);
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice)
    if (cudaError_t e = emu::check_device_range(dst, bytes, "cudaMemcpyAsync destination"); e != cudaSuccess)
      return e;
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice)
    if (cudaError_t e = emu::check_device_range(src, bytes, "cudaMemcpyAsync source"); e != cudaSuccess)
      return e;
  return emu::record(
      stream, [=]() { return static_cast<int>(checked_copy(dst, src, bytes, kind)); }, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                                cudaStream_t stream) {
  if (dst_dev < 0 || dst_dev >= emu::device_count() || src_dev < 0 || src_dev >= emu::device_count())
    return fail(cudaErrorInvalidDevice, "cudaMemcpyPeerAsync");
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (cudaError_t e = emu::unsafe_during_capture("cudaMemset"); e != cudaSuccess) return e;
  return checked_set(ptr, value, bytes);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (!emu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: invalid stream");
  if (!emu::capturing(stream)) return checked_set(ptr, value, bytes);
  if (cudaError_t e = emu::check_device_range(ptr, bytes, "cudaMemsetAsync"); e != cudaSuccess) return e;
  return emu::record(
      stream, [=]() { return static_cast<int>(checked_set(ptr, value, bytes)); }, "cudaMemsetAsync");
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  // A stream is only a handle here: work runs when it is issued, so every stream is in order.
  auto* s = reinterpret_cast<cudaStream_t>(new char(0));
  std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
  emu::g_streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
    if (stream == nullptr || emu::g_streams.erase(stream) == 0)
      return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: invalid stream");
  }
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!emu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: invalid stream");
  return emu::unsafe_during_capture("cudaStreamSynchronize");
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

namespace {
emu::Event* as_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
  return emu::g_events.count(e) ? reinterpret_cast<emu::Event*>(e) : nullptr;
}
}  // namespace

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  auto* e = new emu::Event();
  std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
  emu::g_events.insert(e);
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if ((flags & ~cudaEventDisableTiming) != 0)
    return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: flags not emulated");
  return cudaEventCreate(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  emu::Event* e = as_event(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: invalid event");
  {
    std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
    emu::g_events.erase(event);
  }
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  emu::Event* e = as_event(event);
  if (e == nullptr || !emu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord");
  e->t = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (as_event(event) == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize");
  return emu::unsafe_during_capture("cudaEventSynchronize");
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventSynchronize(event); }

// Host time between the two records: meaningless as a GPU timing (see emulator.h).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  emu::Event* a = as_event(start);
  emu::Event* b = as_event(end);
  if (a == nullptr || b == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime");
  if (!a->recorded || !b->recorded)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not recorded");
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

cudaError_t gpumat_emu_func_set_attribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > emu::kSmemOptin)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(value) +
                                           " bytes exceed the opt-in limit of " +
                                           std::to_string(emu::kSmemOptin));
  std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
  emu::g_max_dynamic_smem[func] = value;
  return cudaSuccess;
}

// ============================================================================ CUDA graphs

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (stream == nullptr)
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaStreamBeginCapture: the legacy default stream cannot be captured");
  if (!emu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamBeginCapture: invalid stream");
  std::lock_guard<std::mutex> lock(emu::g_capture_mutex);
  if (emu::g_captures.count(stream))
    return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
  emu::Capture& c = emu::g_captures[stream];
  c.mode = mode;
  c.owner = std::this_thread::get_id();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  emu::Capture c;
  {
    std::lock_guard<std::mutex> lock(emu::g_capture_mutex);
    auto it = emu::g_captures.find(stream);
    if (it == emu::g_captures.end())
      return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
    c = std::move(it->second);
    emu::g_captures.erase(it);
  }
  if (!c.invalidated.empty())
    return fail(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: invalidated by " + c.invalidated);
  auto* g = new emu::GraphNodes(std::move(c.nodes));
  std::lock_guard<std::mutex> lock(emu::g_capture_mutex);
  emu::g_graphs.insert(g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamIsCapturing");
  std::lock_guard<std::mutex> lock(emu::g_capture_mutex);
  auto it = emu::g_captures.find(stream);
  *status = it == emu::g_captures.end()      ? cudaStreamCaptureStatusNone
            : it->second.invalidated.empty() ? cudaStreamCaptureStatusActive
                                             : cudaStreamCaptureStatusInvalidated;
  return cudaSuccess;
}

namespace {
emu::GraphNodes* as_graph(const void* g, const std::set<const void*>& live) {
  std::lock_guard<std::mutex> lock(emu::g_capture_mutex);
  return live.count(g) ? static_cast<emu::GraphNodes*>(const_cast<void*>(g)) : nullptr;
}
}  // namespace

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* num_nodes) {
  emu::GraphNodes* g = as_graph(graph, emu::g_graphs);
  if (g == nullptr || num_nodes == nullptr) return fail(cudaErrorInvalidValue, "cudaGraphGetNodes");
  if (nodes != nullptr)
    return fail(cudaErrorInvalidValue, "cudaGraphGetNodes: node handles are not emulated");
  *num_nodes = g->size();
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  emu::GraphNodes* g = as_graph(graph, emu::g_graphs);
  if (g == nullptr) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: invalid graph");
  auto* e = new emu::GraphNodes(*g);
  std::lock_guard<std::mutex> lock(emu::g_capture_mutex);
  emu::g_graph_execs.insert(e);
  *exec = reinterpret_cast<cudaGraphExec_t>(e);
  return cudaSuccess;
}

// Runs the recorded work in order; the first failure ends the launch and is returned.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  emu::GraphNodes* e = as_graph(exec, emu::g_graph_execs);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: invalid graph exec");
  if (!emu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: invalid stream");
  if (emu::capturing(stream))
    return fail(cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch into a capturing stream is not emulated");
  for (const auto& node : *e)
    if (int err = node(); err != cudaSuccess) return static_cast<cudaError_t>(err);
  return cudaSuccess;
}

namespace {
// Frees a graph or an executable graph that `live` holds; `bad` is the error for any other handle.
cudaError_t destroy_graph(const void* handle, std::set<const void*>& live, cudaError_t bad,
                          const char* what) {
  emu::GraphNodes* g = as_graph(handle, live);
  if (g == nullptr) return fail(bad, what);
  {
    std::lock_guard<std::mutex> lock(emu::g_capture_mutex);
    live.erase(g);
  }
  delete g;
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return destroy_graph(exec, emu::g_graph_execs, cudaErrorInvalidResourceHandle, "cudaGraphExecDestroy");
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return destroy_graph(graph, emu::g_graphs, cudaErrorInvalidValue, "cudaGraphDestroy");
}
