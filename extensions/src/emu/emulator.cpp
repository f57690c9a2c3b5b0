// The CUDA emulator's engine (execution model in emulator.h): fibers and their context switch, the
// seeded block scheduler with its runner for threads that never wait, block and warp barriers, and
// cp.async. The runtime API is in cuda_runtime.cpp, the memory checks in checks.cpp.
#define GPUMAT_EMU_ENGINE  // the C library's memcpy, memset (see cuda_runtime.h)
#include "emulator.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_runtime.h"
#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define GPUMAT_EMU_ASAN 1
#endif

// The fiber stacks' range and headers (cuda_runtime.h); empty until the first launch.
gpumat::emulator::SlotMap gpumat_emu_slots = {0, 0, nullptr};  // extern "C" (declared so)

namespace gpumat::emulator {

namespace detail {

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 0);
  return (end != nullptr && *end == '\0') ? static_cast<uint64_t>(x) : fallback;
}

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace detail

using detail::stack_bytes;

namespace {

uint64_t schedule_seed() {
  static const uint64_t seed = detail::env_u64("GPUMAT_EMU_SEED", 1);
  return seed;
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

// ---------------------------------------------------------------------------- stack slots
// One address range reserved at the first launch (virtual only: pages are committed as stacks use
// them), cut into aligned slots of kSlotBytes that workers take and keep; and the slots' headers.

size_t g_slots_used = 0;  // slots handed out from the reservation (under g_slot_mutex)
std::mutex g_slot_mutex;
std::vector<char*>* g_returned_slots = new std::vector<char*>();  // given back by ended threads

// Reserves the range (under g_slot_mutex) unless it exists. A failure is not final: the next
// launch tries again, so one launch refused for lack of memory does not refuse every later one.
void reserve_slots() {
  if (gpumat_emu_slots.size != 0) return;
  // 32 Gi of addresses (256 Gi with ASan's larger stacks): 128 workers with 1,024-thread blocks.
  for (size_t bytes = kSlotBytes << 17; bytes >= kSlotBytes << 10; bytes >>= 1) {
    void* p =
        mmap(nullptr, bytes + kSlotBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    void* h = mmap(nullptr, (bytes >> kSlotShift) * sizeof(SlotHeader), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (h == MAP_FAILED) {
      munmap(p, bytes + kSlotBytes);
      continue;
    }
    gpumat_emu_slots.headers = static_cast<SlotHeader*>(h);
    gpumat_emu_slots.lo = (reinterpret_cast<uintptr_t>(p) + kSlotBytes - 1) & ~(kSlotBytes - 1);
    std::atomic_thread_fence(std::memory_order_release);  // the hooks test size last
    gpumat_emu_slots.size = bytes;
    return;
  }
}

// A fresh slot: its stack made accessible, the guard page below it not. std::bad_alloc when there
// is no memory for it; the slot's index is not used up then, so a later call can still have it.
char* new_slot() {
  std::lock_guard<std::mutex> lock(g_slot_mutex);
  if (!g_returned_slots->empty()) {
    char* slot = g_returned_slots->back();
    g_returned_slots->pop_back();
    return slot;
  }
  reserve_slots();
  const size_t i = g_slots_used;
  if (gpumat_emu_slots.size == 0 || (i + 1) * kSlotBytes > gpumat_emu_slots.size) throw std::bad_alloc();
  char* base = reinterpret_cast<char*>(gpumat_emu_slots.lo + i * kSlotBytes);
  const size_t page = detail::page_size();
  if (mprotect(base + page, kSlotBytes - page, PROT_READ | PROT_WRITE) != 0) throw std::bad_alloc();
  g_slots_used = i + 1;
  return base;
}

SlotHeader* header(char* slot) { return detail::slot_header(reinterpret_cast<uintptr_t>(slot)); }
char* stack_of(char* slot) { return slot + detail::page_size(); }
// Where a fresh context's stack starts: below the slot's top by a per-slot offset, so that the hot
// top frames of the threads of a block fall in different cache sets (the slots are 256 KiB apart).
char* stack_top(char* slot) {
  const size_t index = (reinterpret_cast<uintptr_t>(slot) - gpumat_emu_slots.lo) >> kSlotShift;
  return slot + kSlotBytes - (index * 7 % 61) * 64;
}

struct Context {
  void* sp = nullptr;              // asm switch
  std::unique_ptr<ucontext_t> uc;  // ucontext switch (allocated on first use)
  ucontext_t& u() {
    if (uc == nullptr) uc = std::make_unique<ucontext_t>();
    return *uc;
  }
};

enum class State : uint8_t { Ready, BlockBarrier, WarpBarrier, Done };

struct PendingCopy {
  void* dst;
  const void* src;
  size_t bytes, src_bytes;
  int group;
};

struct Fiber {
  Context ctx;
  char* slot = nullptr;  // the stack slot it runs on
  uint3 tid{};
  int linear = 0, warp = 0, lane = 0;
  State state = State::Ready;
  // the collective this fiber waits in
  WarpOp op = WarpOp::Sync;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int src = -1;
  int pred = 0;
  uint32_t warp_epoch = 0;  // the warp's sync count when this lane last passed a collective
  // cp.async
  std::vector<PendingCopy> copies;
  int committed = 0;
  void* fake_stack = nullptr;  // ASan's bookkeeping across switches
};

struct Launch {
  const detail::LaunchSpec* spec;
  detail::LaunchProfile* profile = nullptr;  // when profiling is on
  bool checked = true;  // runs the kernel's checked build (the access hooks check), else its unchecked one
  uint32_t seq;
  uint64_t geometry_hash;
  std::atomic<bool> faulted{false};
  std::mutex fault_mutex;
  uint64_t fault_block = UINT64_MAX;
  std::string fault_msg;
  // Host memory ran out (fiber stacks, the checks' shadows): the launch fails with
  // cudaErrorMemoryAllocation, and the next launch tries again.
  std::atomic<bool> out_of_memory{false};
  std::string oom_msg;  // the first such report (under fault_mutex)

  void record_fault(uint64_t block, const std::string& msg) {
    std::lock_guard<std::mutex> lock(fault_mutex);
    if (block < fault_block) {  // the lowest block's report: the same whichever worker ran first
      fault_block = block;
      fault_msg = msg;
    }
    faulted = true;
  }
  void record_out_of_memory(const std::string& msg) {
    std::lock_guard<std::mutex> lock(fault_mutex);
    if (!out_of_memory) oom_msg = msg;
    out_of_memory = true;
  }
};

// One OS thread's emulation state: the fibers of the running block (reused block after block), a
// pool of stacks, the scheduler's context and the checks' view (`active`).
struct Worker {
  Context sched;
  std::vector<Fiber> fibers;
  std::vector<char*> slots, free_slots;
  std::vector<unsigned char> smem;  // dynamic shared memory of the running block
  Fiber* current = nullptr;
  Launch* launch = nullptr;
  BlockGeometry geometry;
  bool fault = false;
  bool fault_oom = false;  // the fault is host memory running out (see Launch::out_of_memory)
  std::string fault_msg;
  int nthreads = 0, at_block_barrier = 0, done = 0;
  std::vector<int> order, ready, next;  // round 1's order; a later round's; released for the next
  size_t ready_pos = 0;                 // the next of `ready` to run
  bool in_round1 = false;
  std::vector<int> warp_arrived;          // lanes of each warp waiting in a collective
  std::vector<uint32_t> warp_exited;      // lanes of each warp that have ended (bit mask)
  std::vector<uint32_t> warp_lanes;       // lanes of each warp that exist in the block
  std::vector<uint32_t> warp_sync_count;  // collectives each warp has completed
  // The runner: one fiber that runs the threads of the first round one after another, each to its
  // end, on one stack; a thread that blocks keeps the stack and a new runner takes the rest.
  Context runner_ctx;
  Context dead;  // where a fiber that ends for good saves its registers
  int order_pos = 0;
  uint64_t runner_gen = 0;
  int runner_thread = -1;
  char* runner_slot = nullptr;
  detail::Active active;
  bool prepared = false;
  uint32_t interval = 0;
#ifdef GPUMAT_EMU_ASAN
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif

  // Stack slots for n threads and a runner, and the per-warp state of an n-thread block.
  void ensure(int n) {
    const int warps = (n + 31) / 32;
    if (static_cast<int>(fibers.size()) < n) fibers.resize(static_cast<size_t>(n));
    order.resize(static_cast<size_t>(n));
    warp_arrived.assign(static_cast<size_t>(warps), 0);
    warp_exited.assign(static_cast<size_t>(warps), 0);
    warp_sync_count.assign(static_cast<size_t>(warps), 0);
    warp_lanes.resize(static_cast<size_t>(warps));
    for (int wp = 0; wp < warps; ++wp) {
      const int lanes = std::min(32, n - wp * 32);
      warp_lanes[static_cast<size_t>(wp)] = lanes == 32 ? 0xFFFFFFFFu : (1u << lanes) - 1u;
    }
    while (static_cast<int>(slots.size()) < n + 1) {
      char* slot = new_slot();
      SlotHeader* h = header(slot);
      h->geometry = &geometry;
      h->worker = this;
      h->checks = &active;
      slots.push_back(slot);
    }
    free_slots.assign(slots.rbegin(), slots.rend());
  }
};

// The scheduler's worker (kernels find theirs from their stack). It lives as long as its thread
// (OpenMP's pool, a stream's thread); its stack slots then go back for other threads.
struct WorkerHolder {
  Worker* w = nullptr;
  ~WorkerHolder() {
    if (w == nullptr) return;
    std::lock_guard<std::mutex> lock(g_slot_mutex);
    g_returned_slots->insert(g_returned_slots->end(), w->slots.begin(), w->slots.end());
    delete w;
  }
};
thread_local WorkerHolder t_holder;

Worker& worker() {
  if (t_holder.w == nullptr) t_holder.w = new Worker();
  return *t_holder.w;
}

void runner_start();

// A fresh context on slot's stack that starts in runner_start.
void init_context(Context& ctx, char* slot) {
  char* const stack = stack_of(slot);
#ifdef GPUMAT_EMU_ASAN
  // The frames of the previous fiber's way out never returned, so their redzones are still
  // poisoned; kernel frames below them returned and cleaned up after themselves.
  constexpr size_t kExitFrames = 32 * 1024;
  ASAN_UNPOISON_MEMORY_REGION(stack + stack_bytes() - kExitFrames, kExitFrames);
#endif
  if (use_asm_switch()) {
#if defined(__x86_64__)
    uintptr_t top = reinterpret_cast<uintptr_t>(stack_top(slot)) & ~uintptr_t{15};
    uint64_t* sp = reinterpret_cast<uint64_t*>(top);
    *--sp = 0;  // fake return address of runner_start: keeps the ABI's 16-byte alignment
    *--sp = reinterpret_cast<uint64_t>(&runner_start);  // where the first switch's `ret` goes
    for (int i = 0; i < 6; ++i) *--sp = 0;              // rbp rbx r12 r13 r14 r15
    uint32_t mxcsr;
    uint16_t fcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    *--sp = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fcw) << 32);
    ctx.sp = sp;
#endif
  } else {
    getcontext(&ctx.u());
    ctx.u().uc_stack.ss_sp = stack;
    ctx.u().uc_stack.ss_size = stack_bytes();
    ctx.u().uc_link = nullptr;
    makecontext(&ctx.u(), runner_start, 0);
  }
}

void raw_switch(Context& from, Context& to) {
#if defined(__x86_64__)
  if (use_asm_switch()) {
    gpumat_emu_switch(&from.sp, to.sp);
    return;
  }
#endif
  swapcontext(&from.u(), &to.u());
}

// Makes f the running thread: its slot's header and the checks' view follow it.
void enter(Worker& w, Fiber& f) {
  w.current = &f;
  SlotHeader* h = header(f.slot);
  h->thread_idx = f.tid;
  h->fiber = &f;
  w.active.thread = static_cast<uint32_t>(f.linear);
  w.active.slot = reinterpret_cast<uintptr_t>(f.slot);
  w.active.warp_epoch = f.warp_epoch;
}

// Scheduler -> `to` running on `slot`; returns when the fiber blocks or ends.
void switch_in(Worker& w, Context& to, char* slot) {
#ifdef GPUMAT_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack_of(slot), stack_bytes());
  raw_switch(w.sched, to);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)slot;
  raw_switch(w.sched, to);
#endif
  w.current = nullptr;
}

void start_runner(Worker& w);

// Leaves the running fiber, saving into `save` (`dying`: never to be resumed), for what runs next
// on this worker: in the first round a new runner for the threads not yet started, in later rounds
// the round's next fiber, straight from this one (one switch, not two through the scheduler); the
// scheduler when the round is over or the block has faulted.
void yield(Worker& w, Context& save, void** fake_stack, bool dying) {
#ifndef GPUMAT_EMU_ASAN  // with ASan, every switch goes through the scheduler (its fiber annotations)
  if (!w.fault) {
    if (w.in_round1) {
      if (w.order_pos < w.nthreads) {
        start_runner(w);
        raw_switch(save, w.runner_ctx);
        return;
      }
    } else if (w.ready_pos < w.ready.size()) {
      Fiber& next = w.fibers[static_cast<size_t>(w.ready[w.ready_pos++])];
      enter(w, next);
      raw_switch(save, next.ctx);
      return;
    }
  }
#endif
#ifdef GPUMAT_EMU_ASAN
  __sanitizer_start_switch_fiber(dying ? nullptr : fake_stack, w.sched_bottom, w.sched_size);
  raw_switch(save, w.sched);
  __sanitizer_finish_switch_fiber(dying ? nullptr : *fake_stack, &w.sched_bottom, &w.sched_size);
#else
  (void)dying;
  (void)fake_stack;
  raw_switch(save, w.sched);
#endif
}

[[noreturn]] void die(Worker& w) {
  yield(w, w.dead, nullptr, /*dying=*/true);
  std::abort();  // unreachable: a dead context is never resumed
}

std::string coords(const char* what, uint3 v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s (%u, %u, %u)", what, v.x, v.y, v.z);
  return buf;
}

uint3 thread_index(const Worker& w, uint32_t linear) {
  const uint3 b = w.geometry.block_dim;
  return uint3{linear % b.x, (linear / b.x) % b.y, linear / (b.x * b.y)};
}

std::string where(const Worker& w, const Fiber* f) {
  std::string s = std::string("kernel ") + (w.launch ? w.launch->spec->name : "?") + ", " +
                  coords("block", w.geometry.block_idx);
  if (f != nullptr) s += ", " + coords("thread", f->tid);
  return s;
}

// Marks the block faulted; the scheduler abandons it after the running fiber yields.
void block_fault(Worker& w, const std::string& msg, bool out_of_memory = false) {
  if (!w.fault) {
    w.fault = true;
    w.fault_oom = out_of_memory;
    w.fault_msg = msg;
  }
}

// The worker whose fiber is running on this stack, and that fiber (called from kernels only).
Worker& running_worker() { return *static_cast<Worker*>(current_slot()->worker); }
Fiber& running_fiber(const char* what) {
  if (!detail::on_slot(stack_pointer()) || running_worker().current == nullptr) {
    std::fprintf(stderr, "gpumat emulator: %s called outside a kernel\n", what);
    std::abort();
  }
  return *running_worker().current;
}

// The running thread waits from now on: if it was the runner's, the stack is now its own, and the
// scheduler starts a new runner for the threads not yet started.
void leaves_runner(Worker& w, const Fiber& f) {
  if (w.runner_thread == f.linear) {
    w.runner_thread = -1;
    ++w.runner_gen;
  }
}

void release(Worker& w, Fiber& f) {
  f.state = State::Ready;
  w.next.push_back(f.linear);
}

// ---------------------------------------------------------------------------- warp collectives

// Called when fiber `f` arrives at a warp collective whose lanes may all be there: releases them if
// every lane it names has arrived with the same collective and mask.
void try_release_warp(Worker& w, Fiber& f) {
  const int base = f.warp * 32;
  const unsigned mask = f.mask;
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && w.fibers[static_cast<size_t>(base + l)].state != State::WarpBarrier) return;
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
  const uint32_t epoch = ++w.warp_sync_count[static_cast<size_t>(f.warp)];
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
    o.warp_epoch = epoch;
    release(w, o);
  }
  w.warp_arrived[static_cast<size_t>(f.warp)] -= __builtin_popcount(mask);
}

// Thread f has ended: lanes waiting in a collective that names it can never be released.
void thread_ended(Worker& w, Fiber& f) {
  f.state = State::Done;
  ++w.done;
  w.warp_exited[static_cast<size_t>(f.warp)] |= 1u << f.lane;
  if (w.warp_arrived[static_cast<size_t>(f.warp)] == 0) return;
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

// Runs the kernel body as thread f (on whatever stack is current) and records its end. The access
// hooks check only the kernel's own code (see Active::quiet).
void run_thread(Worker& w, Fiber& f) {
  const Launch& L = *w.launch;
  try {
    w.active.quiet = !L.checked;
    (L.checked ? L.spec->body : L.spec->unchecked)(L.spec->args.get());
    w.active.quiet = true;
  } catch (const std::bad_alloc&) {  // the checks' or the profiler's bookkeeping: not a kernel fault
    w.active.quiet = true;
    block_fault(w, where(w, &f) + ": no host memory for the checks' or the profiler's state", true);
  } catch (const std::exception& e) {
    w.active.quiet = true;
    block_fault(w, where(w, &f) + ": exception in the kernel: " + e.what());
  } catch (...) {
    w.active.quiet = true;
    block_fault(w, where(w, &f) + ": exception in the kernel");
  }
  if (!f.copies.empty() && !w.fault)
    block_fault(w, where(w, &f) + ": the thread ended with cp.async copies that no cp_async_wait delivered");
  thread_ended(w, f);
}

// The runner (see Worker): started on a fresh stack by the scheduler. A thread that blocks keeps
// this stack; when it ends (resumed by a later round) it returns here, finds that a newer runner
// took over (runner_gen changed) and the stack goes back to the pool.
void runner_main() {
  Worker& w = running_worker();
  const uint64_t gen = w.runner_gen;
  char* const slot = w.runner_slot;
  while (!w.fault && w.order_pos < w.nthreads) {
    Fiber& f = w.fibers[static_cast<size_t>(w.order[static_cast<size_t>(w.order_pos++)])];
    f.slot = slot;
    enter(w, f);
    w.runner_thread = f.linear;
    run_thread(w, f);
    if (w.runner_gen != gen) break;
  }
  if (w.runner_gen == gen) w.runner_thread = -1;
  w.free_slots.push_back(slot);
  die(w);
}

// Takes a free slot for a new runner (see Worker) and prepares its first context.
void start_runner(Worker& w) {
  w.runner_slot = w.free_slots.back();
  w.free_slots.pop_back();
  ++w.runner_gen;
  init_context(w.runner_ctx, w.runner_slot);
}

// A runner's first instruction (entered by the first switch, never called). ASan must learn that it
// runs on a new stack before anything else.
void runner_start() {
#ifdef GPUMAT_EMU_ASAN
  Worker& w = running_worker();
  __sanitizer_finish_switch_fiber(nullptr, &w.sched_bottom, &w.sched_size);
#endif
  runner_main();
}

// xorshift64*, and a number in [0, n) from its high bits (Lemire): the scheduler's random orders.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  uint32_t below(uint32_t n) {
    return static_cast<uint32_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  void shuffle(std::vector<int>& v, size_t n) {
    for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[below(static_cast<uint32_t>(i))]);  // Fisher-Yates
  }
};

void run_block(Launch& L, uint64_t linear) {
  Worker& w = worker();
  const detail::LaunchSpec& spec = *L.spec;
  const Dim g = spec.grid, b = spec.block;
  w.geometry.block_idx =
      uint3{static_cast<unsigned>(linear % g.x), static_cast<unsigned>((linear / g.x) % g.y),
            static_cast<unsigned>(linear / (static_cast<uint64_t>(g.x) * g.y))};
  w.geometry.block_dim = uint3{b.x, b.y, b.z};
  w.geometry.grid_dim = uint3{g.x, g.y, g.z};
  const int n = static_cast<int>(b.x * b.y * b.z);
  w.ensure(n);
  w.launch = &L;
  w.fault = false;
  w.fault_oom = false;
  w.fault_msg.clear();
  w.nthreads = n;
  w.at_block_barrier = 0;
  w.done = 0;
  try {
    if (spec.smem > 0) w.smem.resize(spec.smem + 16);
    if (!w.prepared) {
      detail::prepare_worker(w.active);
      w.prepared = true;
    }
    detail::prepare_block(
        w.active, spec.smem,
        spec.smem > 0 ? (reinterpret_cast<uintptr_t>(w.smem.data()) + 15) & ~uintptr_t{15} : 0);
  } catch (const std::bad_alloc&) {  // a later launch tries again
    L.record_out_of_memory(where(w, nullptr) +
                           ": no host memory for its shared memory and the checks' shadow of it");
    w.launch = nullptr;
    return;
  }
  if (spec.smem > 0) std::memset(w.smem.data(), 0xFF, w.smem.size());  // NaN: a read before any write shows
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
    f.warp_epoch = 0;
  }
  // The checks' view of this block.
  detail::Active& a = w.active;
  a.kernel = spec.name;
  a.launch_seq = L.seq;
  if (w.interval > 0xFFFF0000u) {  // the interval numbers wrap: forget every shadow entry first
    detail::reset_shared_shadows(a);
    w.interval = 0;
  }
  a.interval = a.first_interval = ++w.interval;
  a.block_linear = linear;
  a.params_lo = reinterpret_cast<uintptr_t>(spec.args.get());
  a.params_size = spec.args_bytes;
  a.checks = spec.checks;
  detail::profile_block_begin(a, L.profile);

  Rng rng{splitmix64(schedule_seed() ^ L.geometry_hash ^ splitmix64(linear)) | 1};
  for (int i = 0; i < n; ++i) w.order[static_cast<size_t>(i)] = i;
  rng.shuffle(w.order, static_cast<size_t>(n));
  // Round 1: runners take the threads in a random order; each runs until it ends or blocks.
  w.next.clear();
  w.order_pos = 0;
  w.runner_thread = -1;
  w.in_round1 = true;
  while (w.order_pos < n && !w.fault) {
    start_runner(w);
    switch_in(w, w.runner_ctx, w.runner_slot);
  }
  w.in_round1 = false;
  // Later rounds: the threads released by barriers and collectives, each in a random order; each
  // fiber that blocks or ends switches to the next (see yield).
  while (!w.next.empty() && !w.fault) {
    w.ready.swap(w.next);
    w.next.clear();
    rng.shuffle(w.ready, w.ready.size());
    for (w.ready_pos = 0; w.ready_pos < w.ready.size() && !w.fault;) {
      Fiber& f = w.fibers[static_cast<size_t>(w.ready[w.ready_pos++])];
      enter(w, f);
      switch_in(w, f.ctx, f.slot);
    }
  }
  if (!w.fault && w.done != n) {
    int at_warp = 0;
    for (int i = 0; i < n; ++i) at_warp += w.fibers[static_cast<size_t>(i)].state == State::WarpBarrier;
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        ": deadlock: %d of %d threads wait at __syncthreads(), %d in warp collectives, %d have exited "
        "(a barrier in divergent code is undefined behaviour on a GPU)",
        w.at_block_barrier, n, at_warp, w.done);
    block_fault(w, where(w, nullptr) + buf);
  }
  if (w.fault) {
#ifdef GPUMAT_EMU_ASAN
    // Abandoned fibers leave poisoned frames behind; the next block reuses these stacks.
    for (char* slot : w.slots) ASAN_UNPOISON_MEMORY_REGION(stack_of(slot), stack_bytes());
#endif
    if (w.fault_oom)
      L.record_out_of_memory(w.fault_msg);
    else
      L.record_fault(linear, w.fault_msg);
  }
  detail::profile_block_end(a, w.fault);
  w.launch = nullptr;
}

#ifdef GPUMAT_EMU_ASAN
// A sanitizer report ends the process; this names the emulated thread that was running.
void on_sanitizer_death() {
  Worker* w = t_holder.w;
  if (w == nullptr || w->launch == nullptr) return;
  std::fprintf(stderr, "gpumat emulator: the fault above happened in %s\n", where(*w, w->current).c_str());
}
const bool g_death_callback_installed = [] {
  __sanitizer_set_death_callback(on_sanitizer_death);
  return true;
}();
#endif

std::atomic<uint32_t> g_launch_seq{0};

// ---------------------------------------------------------------------------- repeated launches
// A launch runs its kernel's unchecked build when it repeats one that has passed the checks
// check_repeats times (GPUMAT_EMU_CHECK_REPEATS, see emulator.h): the same kernel, geometry,
// dynamic shared memory, argument bytes, enabled checks and schedule seed, with no device
// allocation made, freed or handed out again since (detail::memory_epoch()), so that its pointers
// name the same live allocations, whose initcheck state its checked runs have already set.

// The identity of a launch (0 is reserved for "always checked"). 64 bits: a collision would only
// let a launch that never passed the checks run unchecked.
uint64_t launch_key(const detail::LaunchSpec& spec) {
  uint64_t h = splitmix64(reinterpret_cast<uintptr_t>(spec.kernel) ^ schedule_seed());
  const auto mix = [&h](uint64_t v) { h = splitmix64(h ^ v); };
  mix(uint64_t{spec.grid.x} << 32 | spec.grid.y);
  mix(uint64_t{spec.grid.z} << 32 | spec.block.x);
  mix(uint64_t{spec.block.y} << 32 | spec.block.z);
  mix(spec.smem);
  mix(spec.checks);
  const auto* bytes = static_cast<const unsigned char*>(spec.args.get());
  size_t i = 0;
  for (; i + 8 <= spec.args_bytes; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    mix(word);
  }
  for (; i < spec.args_bytes; ++i) mix(bytes[i]);
  return h | 1;
}

class RepeatTable {
 public:
  // Whether this run of launch `key` is checked; check_repeats 0: every run is.
  bool should_check(uint64_t key, uint32_t check_repeats) {
    if (check_repeats == 0) return true;
    const uint64_t epoch = detail::memory_epoch();
    std::lock_guard<std::mutex> lock(m_);
    auto it = passed_.find(key);
    if (it == passed_.end() || it->second.epoch != epoch) return true;
    return it->second.count < check_repeats;
  }
  // A checked run of `key` passed (it ran to its end with no report).
  void passed(uint64_t key) {
    const uint64_t epoch = detail::memory_epoch();
    std::lock_guard<std::mutex> lock(m_);
    if (passed_.size() >= kMaxEntries) passed_.clear();  // bounded: forgetting only adds checks
    Entry& e = passed_[key];
    if (e.epoch != epoch) e = Entry{epoch, 0};
    ++e.count;
  }

 private:
  struct Entry {
    uint64_t epoch = 0;
    uint32_t count = 0;
  };
  static constexpr size_t kMaxEntries = 1 << 16;
  std::mutex m_;
  std::unordered_map<uint64_t, Entry> passed_;
};
RepeatTable g_repeats;

// The unchecked builds of the kernels, by name (function-local: registrations run while the
// library loads, in no particular order relative to this file's statics).
struct UncheckedRegistry {
  std::mutex m;
  std::unordered_map<std::string, ThreadBody> bodies;  // nullptr: the name is ambiguous
};
UncheckedRegistry& unchecked_registry() {
  static UncheckedRegistry* r = new UncheckedRegistry;  // never destroyed: registrations may outlive it
  return *r;
}

// The unchecked build's kernel name as the checked build spells it.
std::string checked_spelling(std::string name) {
  static const std::string from = "gpumat::emu_unchecked::", to = "gpumat::emu::";
  for (size_t at = name.find(from); at != std::string::npos; at = name.find(from, at + to.size()))
    name.replace(at, from.size(), to);
  return name;
}

}  // namespace

// ============================================================================ engine services

namespace detail {

std::string where_running() {
  Worker& w = running_worker();
  return where(w, w.current);
}

std::string thread_coords(uint32_t linear) {
  return coords("thread", thread_index(running_worker(), linear));
}

std::string block_coords(uint64_t linear) {
  const uint3 g = running_worker().geometry.grid_dim;
  return coords("block",
                uint3{static_cast<unsigned>(linear % g.x), static_cast<unsigned>((linear / g.x) % g.y),
                      static_cast<unsigned>(linear / (static_cast<uint64_t>(g.x) * g.y))});
}

void fault_running_thread(const std::string& what, bool out_of_memory) {
  Fiber& f = running_fiber("a memory check");
  Worker& w = running_worker();
  w.active.quiet = true;
  block_fault(w, where(w, &f) + ": " + what, out_of_memory);
  f.state = State::Done;
  die(w);
}

cudaError_t execute(const LaunchSpec& spec, std::string* detail) {
  Launch L;
  L.spec = &spec;
  L.seq = ++g_launch_seq;
  L.profile = detail::profile_launch_begin(spec);
  // The profiler counts what the checked build's hooks see.
  const uint64_t repeat_key = spec.unchecked != nullptr && L.profile == nullptr ? launch_key(spec) : 0;
  L.checked = repeat_key == 0 || g_repeats.should_check(repeat_key, spec.check_repeats);
  const Dim grid = spec.grid, block = spec.block;
  L.geometry_hash = splitmix64(
      fnv1a(spec.name) ^ splitmix64((uint64_t{grid.x} << 32) ^ grid.y) ^
      splitmix64((uint64_t{grid.z} << 40) ^ (uint64_t{block.x} << 20) ^ (uint64_t{block.y} << 10) ^ block.z));
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    if (L.faulted.load(std::memory_order_relaxed) || L.out_of_memory.load(std::memory_order_relaxed))
      continue;
    try {
      run_block(L, static_cast<uint64_t>(blk));
    } catch (const std::bad_alloc&) {
      L.record_out_of_memory(std::string("launch of ") + spec.name + ": no memory for fiber stacks");
    }
  }
  detail::profile_launch_end(L.profile, !L.out_of_memory && !L.faulted);
  if (L.out_of_memory) {
    *detail = L.oom_msg;
    return cudaErrorMemoryAllocation;
  }
  if (L.faulted) {
    *detail = L.fault_msg;
    return cudaErrorLaunchFailure;
  }
  if (L.checked && repeat_key != 0) g_repeats.passed(repeat_key);
  return cudaSuccess;
}

}  // namespace detail

// ============================================================================ unchecked builds

void register_unchecked(const std::string& kernel_name, ThreadBody body) {
  UncheckedRegistry& r = unchecked_registry();
  std::lock_guard<std::mutex> lock(r.m);
  auto [it, fresh] = r.bodies.emplace(checked_spelling(kernel_name), body);
  if (!fresh && it->second != body) it->second = nullptr;  // two kernels of one name: neither
}

ThreadBody find_unchecked(const std::string& kernel_name) {
  UncheckedRegistry& r = unchecked_registry();
  std::lock_guard<std::mutex> lock(r.m);
  auto it = r.bodies.find(kernel_name);
  return it == r.bodies.end() ? nullptr : it->second;
}

// ============================================================================ device-side API

void sync_block() { sync_block_count(0); }

// The engine's functions that kernels call run with the access hooks quiet (Active::quiet) and turn
// them back on as they return to the kernel.
struct EngineSection {
  detail::Active& a;
  bool was_quiet;
  explicit EngineSection(Worker& w) : a(w.active), was_quiet(w.active.quiet) { a.quiet = true; }
  ~EngineSection() { a.quiet = was_quiet; }
};

int sync_block_count(int pred) {
  Fiber& f = running_fiber("__syncthreads");
  Worker& w = running_worker();
  EngineSection engine(w);
  f.pred = pred;
  f.state = State::BlockBarrier;
  leaves_runner(w, f);
  if (++w.at_block_barrier == w.nthreads) {
    int count = 0;
    for (int i = 0; i < w.nthreads; ++i) count += w.fibers[static_cast<size_t>(i)].pred != 0;
    for (int i = 0; i < w.nthreads; ++i) {
      Fiber& o = w.fibers[static_cast<size_t>(i)];
      o.result = static_cast<uint64_t>(count);
      release(w, o);
    }
    w.at_block_barrier = 0;
    detail::profile_barrier(w.active);
    w.active.interval =
        ++w.interval;  // racecheck: accesses before the barrier are ordered before those after
  }
  yield(w, f.ctx, &f.fake_stack, false);
  return static_cast<int>(f.result);
}

uint64_t warp_collective(WarpOp kind, unsigned mask, uint64_t value, int src_lane) {
  Fiber& f = running_fiber("a warp intrinsic");
  Worker& w = running_worker();
  EngineSection engine(w);
  f.op = kind;
  f.mask = mask;
  f.value = value;
  f.src = src_lane < 0 ? f.linear : f.warp * 32 + src_lane;
  f.state = State::WarpBarrier;
  leaves_runner(w, f);
  const size_t wp = static_cast<size_t>(f.warp);
  if ((mask >> f.lane & 1u) == 0) {
    block_fault(w, where(w, &f) + ": warp collective with a mask that does not include the calling lane");
  } else if (const uint32_t missing = mask & ~w.warp_lanes[wp]; missing != 0) {
    block_fault(w, where(w, &f) + ": warp collective mask names lane " +
                       std::to_string(__builtin_ctz(missing)) + ", which does not exist in this block");
  } else if (const uint32_t gone = mask & w.warp_exited[wp]; gone != 0) {
    block_fault(w, where(w, &f) + ": warp collective mask names lane " + std::to_string(__builtin_ctz(gone)) +
                       ", which has already exited");
  } else if (++w.warp_arrived[wp] >= __builtin_popcount(mask)) {
    try_release_warp(w, f);
  }
  yield(w, f.ctx, &f.fake_stack, false);
  return f.result;
}

int lane_id() { return running_fiber("lane_id").lane; }

unsigned active_mask() {
  Fiber& f = running_fiber("__activemask");
  const Worker& w = running_worker();
  return w.warp_lanes[static_cast<size_t>(f.warp)] & ~w.warp_exited[static_cast<size_t>(f.warp)];
}

void* dynamic_smem() {
  running_fiber("dynamic_smem");
  Worker& w = running_worker();
  if (w.launch->spec->smem == 0) return nullptr;
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(w.smem.data()) + 15) & ~uintptr_t{15});
}

void cp_async(void* dst, const void* src, size_t bytes, size_t src_bytes) {
  Fiber& f = running_fiber("cp.async");
  EngineSection engine(running_worker());
  f.copies.push_back({dst, src, bytes, src_bytes, f.committed});
}

void cp_async_commit() { ++running_fiber("cp.async.commit_group").committed; }

void cp_async_wait(int pending_groups) {
  Fiber& f = running_fiber("cp.async.wait_group");
  // Groups committed before the newest `pending_groups` ones are delivered; uncommitted copies stay.
  const int deliver_below = f.committed - pending_groups;
  // The copies are this thread's accesses (a read of the source, a write of the destination).
  for (const PendingCopy& c : f.copies) {
    if (c.group >= deliver_below) continue;
    if (c.src_bytes > 0) detail::check_access(c.src, c.src_bytes, false);
    detail::check_access(c.dst, c.bytes, true);
  }
  EngineSection engine(running_worker());
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

void device_fault(const char* what) { detail::fault_running_thread(what); }

}  // namespace gpumat::emulator
