// The runtime API of cuda_runtime.h on the emulated device (execution model in emulator.h): device
// memory with the checks' shadow state, streams with a worker thread each (work is queued and runs
// asynchronously, in order per stream), events, stream capture and graphs, errors.
#define GPUMAT_EMU_ENGINE  // the C library's memcpy, memset (see cuda_runtime.h)
#include "cuda_runtime.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emulator.h"
#include "internal.h"

namespace gpumat::emulator {
namespace detail {

namespace {

// ============================================================================ configuration

size_t memory_capacity() {
  static const size_t bytes = static_cast<size_t>(env_u64("GPUMAT_EMU_MEMORY_BYTES", size_t{8} << 30));
  return bytes;
}
// GPUMAT_EMU_HOST_MEMORY_BYTES: a cap on the host memory all emulated allocations may hold, data
// and shadows (see host_bytes); SIZE_MAX when unset.
size_t host_memory_limit() {
  static const size_t bytes = static_cast<size_t>(env_u64("GPUMAT_EMU_HOST_MEMORY_BYTES", SIZE_MAX));
  return bytes;
}
int device_count() {
  static const int n =
      static_cast<int>(std::min<uint64_t>(std::max<uint64_t>(env_u64("GPUMAT_EMU_DEVICES", 1), 1), 8));
  return n;
}
// GPUMAT_EMU_LAUNCH_BLOCKING=1: every queued operation runs before the call that queues it returns
// (CUDA_LAUNCH_BLOCKING's meaning), so a kernel's fault is returned by its launch. Read at every
// call, so that a test can switch it.
bool launch_blocking() { return env_u64("GPUMAT_EMU_LAUNCH_BLOCKING", 0) != 0; }

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

// ============================================================================ errors

// As in CUDA, the last error is per host thread.
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local std::string t_last_detail;

thread_local int t_device = 0;

}  // namespace

cudaError_t fail(cudaError_t err, std::string detail) {
  t_last_error = err;
  t_last_detail = std::move(detail);
  return err;
}

// What an operation queued on a stream returns when it has run.
struct Status {
  cudaError_t err = cudaSuccess;
  std::string detail;
};

namespace {

// ============================================================================ device memory

std::shared_mutex g_mem_mutex;                             // guards the maps and the counters below
std::map<uintptr_t, std::unique_ptr<Segment>> g_segments;  // by base address
std::map<uintptr_t, size_t> g_pinned;                      // live cudaHostAlloc blocks: base -> bytes
size_t g_bytes_in_use[8] = {};
std::atomic<uint64_t> g_memory_epoch{0};  // see memory_epoch()

// Device memory is host memory with the checks' shadows beside it. Per byte of an allocation
// (rounded up to 256 bytes): the byte itself, 1/4 byte of initcheck's shadow (made with it) and 2
// bytes of racecheck's (made at the first plain kernel write): 13/4 host bytes. cudaMalloc charges
// all of it at once and refuses what the host cannot back, so that a later write finds the memory
// instead of the OOM killer finding the process.
constexpr size_t host_bytes(size_t rounded) { return rounded / 4 * 13; }
constexpr size_t race_shadow_bytes(size_t rounded) { return rounded / 4 * sizeof(uint64_t); }
size_t g_host_charged = 0;              // host_bytes of the live allocations, all devices
std::atomic<size_t> g_host_pending{0};  // the part not allocated yet (racecheck's shadows to come)

// MemAvailable of /proc/meminfo in bytes (what the host can give without swapping), or SIZE_MAX
// where it is not known.
size_t host_memory_available() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return SIZE_MAX;
  char line[256];
  unsigned long long kib = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr)
    found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
  std::fclose(f);
  return found ? static_cast<size_t>(kib) * 1024 : SIZE_MAX;
}

// The host bytes new allocations may be charged: what the host has available less what earlier
// allocations are charged but do not hold yet, and at most what GPUMAT_EMU_HOST_MEMORY_BYTES leaves.
// `available`: host_memory_available(). Caller holds g_mem_mutex.
size_t host_bytes_free(size_t available) {
  const size_t pending = g_host_pending.load(std::memory_order_relaxed);
  const size_t by_host = available > pending ? available - pending : 0;
  const size_t by_limit = host_memory_limit() > g_host_charged ? host_memory_limit() - g_host_charged : 0;
  return std::min(by_host, by_limit);
}

// The segment that holds [p, p + bytes) within what cudaMalloc was asked for, or nullptr. Caller
// holds g_mem_mutex.
Segment* segment_holding(uintptr_t p, size_t bytes) {
  auto it = g_segments.upper_bound(p);
  if (it == g_segments.begin()) return nullptr;
  --it;
  Segment* s = it->second.get();
  return (p >= s->base && p + bytes <= s->base + s->bytes) ? s : nullptr;
}

bool is_pinned(uintptr_t p, size_t bytes) {
  std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  return p + bytes <= it->first + it->second;
}

cudaError_t check_device_range(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return cudaSuccess;
  {
    std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
    if (segment_holding(reinterpret_cast<uintptr_t>(p), bytes) != nullptr) return cudaSuccess;
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s: [%p, %p + %zu bytes) is not inside one device allocation", what, p, p,
                bytes);
  return fail(cudaErrorInvalidValue, buf);
}

}  // namespace

uint64_t memory_epoch() { return g_memory_epoch.load(std::memory_order_acquire); }

void race_shadow_made(const Segment* s) {
  g_host_pending.fetch_sub(race_shadow_bytes(s->capacity), std::memory_order_relaxed);
}

Segment* segment_at(uintptr_t p) {
  std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
  auto it = g_segments.upper_bound(p);
  if (it == g_segments.begin()) return nullptr;
  --it;
  Segment* s = it->second.get();
  return p - s->base < s->capacity ? s : nullptr;
}

std::string describe_device_address(uintptr_t p, size_t n) {
  std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
  char buf[320];
  auto it = g_segments.upper_bound(p);
  const Segment* below = it == g_segments.begin() ? nullptr : std::prev(it)->second.get();
  const Segment* above = it == g_segments.end() ? nullptr : it->second.get();
  if (below != nullptr && p - below->base < below->capacity) {
    const size_t live = below->live.load(std::memory_order_relaxed);
    const size_t off = p - below->base;
    if (below->cached.load(std::memory_order_relaxed))
      std::snprintf(buf, sizeof buf,
                    "inside a block that gpumat's allocator has freed and cached (offset %zu of the %zu-byte "
                    "block at %#lx): a use after free",
                    off, below->bytes, static_cast<unsigned long>(below->base));
    else if (off + n > live)
      std::snprintf(buf, sizeof buf, "%zu bytes past the end of the %zu-byte allocation at %#lx%s",
                    off + n - live, live, static_cast<unsigned long>(below->base),
                    off >= live ? " (its rounding slack)" : "");
    else
      std::snprintf(buf, sizeof buf, "offset %zu of the %zu-byte allocation at %#lx", off, live,
                    static_cast<unsigned long>(below->base));
    return buf;
  }
  std::string s = "not inside any device allocation";
  // The nearest allocations, when the address is close enough to one to be an index gone wrong.
  if (below != nullptr && !below->cached.load(std::memory_order_relaxed) &&
      p - below->base < below->capacity + 4096) {
    std::snprintf(buf, sizeof buf, "; %zu bytes past the end of the %zu-byte allocation at %#lx",
                  p - (below->base + below->live.load(std::memory_order_relaxed)),
                  below->live.load(std::memory_order_relaxed), static_cast<unsigned long>(below->base));
    s += buf;
  }
  if (above != nullptr && above->base - p <= 4096) {
    std::snprintf(buf, sizeof buf, "; %zu bytes before the allocation at %#lx", above->base - p,
                  static_cast<unsigned long>(above->base));
    s += buf;
  }
  return s;
}

void mark_initialised(Segment* s, uintptr_t p, size_t n) {
  if (s == nullptr || n == 0) return;
  size_t off = p - s->base;
  const size_t end = off + n;
  uint8_t* init = s->init.get();
  while (off < end && (off & 3)) {  // a partial first word
    __atomic_fetch_or(&init[off >> 2], static_cast<uint8_t>(1u << (off & 3)), __ATOMIC_RELAXED);
    ++off;
  }
  if (end - off >= 4) {
    std::memset(init + (off >> 2), 0x0F, (end - off) >> 2);
    off += (end - off) & ~size_t{3};
  }
  for (; off < end; ++off)
    __atomic_fetch_or(&init[off >> 2], static_cast<uint8_t>(1u << (off & 3)), __ATOMIC_RELAXED);
}

void copy_initialised(Segment* dst_seg, uintptr_t dst, Segment* src_seg, uintptr_t src, size_t n) {
  if (dst_seg == nullptr || n == 0) return;
  if (src_seg == nullptr) return mark_initialised(dst_seg, dst, n);
  const size_t d = dst - dst_seg->base, s = src - src_seg->base;
  uint8_t *di = dst_seg->init.get(), *si = src_seg->init.get();
  if ((d & 3) == 0 && (s & 3) == 0) {
    std::memmove(di + (d >> 2), si + (s >> 2), n >> 2);
    for (size_t i = n & ~size_t{3}; i < n; ++i) {
      const bool on = si[(s + i) >> 2] >> ((s + i) & 3) & 1u;
      if (on)
        __atomic_fetch_or(&di[(d + i) >> 2], static_cast<uint8_t>(1u << ((d + i) & 3)), __ATOMIC_RELAXED);
      else
        __atomic_fetch_and(&di[(d + i) >> 2], static_cast<uint8_t>(~(1u << ((d + i) & 3))), __ATOMIC_RELAXED);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const bool on = si[(s + i) >> 2] >> ((s + i) & 3) & 1u;
    if (on)
      __atomic_fetch_or(&di[(d + i) >> 2], static_cast<uint8_t>(1u << ((d + i) & 3)), __ATOMIC_RELAXED);
    else
      __atomic_fetch_and(&di[(d + i) >> 2], static_cast<uint8_t>(~(1u << ((d + i) & 3))), __ATOMIC_RELAXED);
  }
}

namespace {

// ============================================================================ streams
// Each stream has a FIFO of operations and a worker thread that runs them in order, so the host
// returns from a launch or an async copy before the work is done, as on a GPU. The legacy default
// stream (cudaStream_t 0, one per device) waits for the blocking streams' earlier work and they
// wait for its; non-blocking streams are independent of it. The first failure of queued work is
// kept by its stream and returned by the next call that synchronizes with it.

using Op = std::function<Status()>;

struct Stream {
  int dev = 0;
  bool legacy = false;   // the device's legacy default stream
  bool blocking = true;  // synchronizes with the legacy stream (not cudaStreamNonBlocking)
  std::mutex m;
  std::condition_variable work_cv, done_cv;
  std::deque<std::pair<uint64_t, Op>> queue;  // (ticket, operation)
  uint64_t enqueued = 0, completed = 0;       // tickets handed out; operations finished (in order)
  Status error;                               // the first failure of queued work not yet reported
  bool worker = false;
  bool destroyed = false;  // by cudaStreamDestroy: the worker ends when the queue is empty
};
using StreamPtr = std::shared_ptr<Stream>;

std::mutex g_handle_mutex;
std::map<const void*, StreamPtr> g_streams;  // user streams by handle
std::vector<StreamPtr> g_legacy;             // per device
std::set<const void*> g_events;

// At most this many operations wait on a stream: a host that queues faster than the device runs
// then blocks in the launch, as it does on a GPU, whose launch queue is bounded too (about a
// thousand entries); an unbounded queue would let a spinning thread exhaust host memory.
constexpr uint64_t kMaxPending = 1024;
thread_local bool t_stream_worker = false;  // a worker never waits on a queue (its own may be full)

// Operations run in ticket order, whether the worker runs them or a caller runs one inline.
void worker_loop(StreamPtr s) {
  t_stream_worker = true;
  std::unique_lock<std::mutex> lock(s->m);
  for (;;) {
    s->work_cv.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
    if (s->queue.empty()) {
      s->worker = false;
      return;
    }
    auto [ticket, op] = std::move(s->queue.front());
    s->queue.pop_front();
    s->done_cv.wait(lock, [&, t = ticket] { return s->completed == t - 1; });
    lock.unlock();
    Status st = op();
    op = nullptr;  // release what it captured before reporting completion
    lock.lock();
    if (st.err != cudaSuccess && s->error.err == cudaSuccess) s->error = std::move(st);
    s->completed = ticket;
    s->done_cv.notify_all();
  }
}

// Forked children have no worker threads (only the forking thread survives a fork): they restart
// on first use. The locks may have been held by a thread that no longer exists.
void after_fork_in_child() {
  new (&g_handle_mutex) std::mutex();
  auto reset = [](const StreamPtr& s) {
    if (s == nullptr) return;
    new (&s->m) std::mutex();
    new (&s->work_cv) std::condition_variable();
    new (&s->done_cv) std::condition_variable();
    s->worker = false;
    if (!s->queue.empty()) {
      s->worker = true;
      std::thread(worker_loop, s).detach();
    }
  };
  for (auto& [h, s] : g_streams) reset(s);
  for (auto& s : g_legacy) reset(s);
}

StreamPtr legacy_stream(int dev) {
  std::lock_guard<std::mutex> lock(g_handle_mutex);
  if (g_legacy.empty()) {
    g_legacy.resize(static_cast<size_t>(device_count()));
    pthread_atfork(nullptr, nullptr, after_fork_in_child);
  }
  StreamPtr& s = g_legacy[static_cast<size_t>(dev)];
  if (s == nullptr) {
    s = std::make_shared<Stream>();
    s->dev = dev;
    s->legacy = true;
  }
  return s;
}

// The stream behind a handle (nullptr: the current device's legacy stream), or nullptr if invalid.
StreamPtr find_stream(cudaStream_t h) {
  if (h == nullptr) return legacy_stream(t_device);
  std::lock_guard<std::mutex> lock(g_handle_mutex);
  auto it = g_streams.find(h);
  return it == g_streams.end() ? nullptr : it->second;
}

bool valid_stream(cudaStream_t h) { return find_stream(h) != nullptr; }

void wait_until(Stream& s, uint64_t ticket) {
  std::unique_lock<std::mutex> lock(s.m);
  s.done_cv.wait(lock, [&] { return s.completed >= ticket; });
}

// The streams whose earlier work an operation on s must wait for (the legacy stream's rule).
std::vector<std::pair<StreamPtr, uint64_t>> implicit_dependencies(const Stream& s) {
  std::vector<std::pair<StreamPtr, uint64_t>> deps;
  if (!s.legacy && !s.blocking) return deps;
  std::vector<StreamPtr> others;
  {
    std::lock_guard<std::mutex> lock(g_handle_mutex);
    if (s.legacy) {
      for (auto& [h, o] : g_streams)
        if (o->dev == s.dev && o->blocking) others.push_back(o);
    } else if (static_cast<size_t>(s.dev) < g_legacy.size() &&
               g_legacy[static_cast<size_t>(s.dev)] != nullptr) {
      others.push_back(g_legacy[static_cast<size_t>(s.dev)]);
    }
  }
  for (auto& o : others) {
    std::lock_guard<std::mutex> lock(o->m);
    if (o->completed < o->enqueued) deps.emplace_back(o, o->enqueued);
  }
  return deps;
}

Op with_dependencies(const Stream& s, Op op) {
  auto deps = implicit_dependencies(s);
  if (deps.empty()) return op;
  return [deps = std::move(deps), inner = std::move(op)]() {
    for (auto& [o, ticket] : deps) wait_until(*o, ticket);
    return inner();
  };
}

// Runs `op` now on the calling thread, in s's order (after the work queued before it), and returns
// its failure (also the thread's last error).
cudaError_t run_inline(const StreamPtr& s, Op op) {
  op = with_dependencies(*s, std::move(op));
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(s->m);
    ticket = ++s->enqueued;
  }
  {
    std::unique_lock<std::mutex> lock(s->m);
    s->done_cv.wait(lock, [&] { return s->completed == ticket - 1; });
  }
  Status st = op();
  {
    std::lock_guard<std::mutex> lock(s->m);
    s->completed = ticket;
  }
  s->done_cv.notify_all();
  return st.err == cudaSuccess ? cudaSuccess : fail(st.err, st.detail);
}

// Queues `op` on s and returns its ticket (s is done with it when completed >= ticket). With
// GPUMAT_EMU_LAUNCH_BLOCKING=1 it runs inline instead and its failure is returned in *now (else
// *now is cudaSuccess).
uint64_t submit(const StreamPtr& s, Op op, cudaError_t* now) {
  *now = cudaSuccess;
  if (launch_blocking()) {
    *now = run_inline(s, std::move(op));
    std::lock_guard<std::mutex> lock(s->m);
    return s->completed;
  }
  op = with_dependencies(*s, std::move(op));
  std::unique_lock<std::mutex> lock(s->m);
  if (!t_stream_worker)
    s->done_cv.wait(lock, [&] { return s->enqueued - s->completed < kMaxPending || s->destroyed; });
  const uint64_t ticket = ++s->enqueued;
  s->queue.emplace_back(ticket, std::move(op));
  if (!s->worker) {
    s->worker = true;
    std::thread(worker_loop, s).detach();
  }
  s->work_cv.notify_one();
  return ticket;
}

// Waits for everything queued on s so far; returns (and clears) the stream's first failure.
cudaError_t drain(Stream& s) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(s.m);
    ticket = s.enqueued;
  }
  wait_until(s, ticket);
  std::lock_guard<std::mutex> lock(s.m);
  if (s.error.err == cudaSuccess) return cudaSuccess;
  Status st = std::move(s.error);
  s.error = Status{};
  return fail(st.err, st.detail);
}

// Every stream of device `dev` (-1: of every device).
std::vector<StreamPtr> streams_of(int dev) {
  std::vector<StreamPtr> out;
  std::lock_guard<std::mutex> lock(g_handle_mutex);
  for (auto& [h, s] : g_streams)
    if (dev < 0 || s->dev == dev) out.push_back(s);
  for (auto& s : g_legacy)
    if (s != nullptr && (dev < 0 || s->dev == dev)) out.push_back(s);
  return out;
}

cudaError_t drain_all(int dev) {
  cudaError_t first = cudaSuccess;
  std::string detail;
  for (auto& s : streams_of(dev)) {
    const cudaError_t e = drain(*s);
    if (e != cudaSuccess && first == cudaSuccess) {
      first = e;
      detail = t_last_detail;
    }
  }
  return first == cudaSuccess ? cudaSuccess : fail(first, detail);
}

// Work still queued when the process exits runs first: its effects (and a hung kernel) are not lost
// silently, and no worker touches the emulator while it is torn down.
const bool g_drain_at_exit = [] {
  std::atexit([] { drain_all(-1); });
  return true;
}();

std::map<const void*, int> g_max_dynamic_smem;  // per kernel, set by cudaFuncSetAttribute

// ============================================================================ stream capture

// A captured stream's work in issue order; an instantiated graph runs the same closures, in order,
// as one operation of the stream it is launched on.
using GraphNodes = std::vector<std::function<Status()>>;
struct Capture {
  GraphNodes nodes;
  // Where "potentially unsafe" calls fail: on every thread (cudaStreamCaptureModeGlobal), on the
  // capturing thread only (ThreadLocal), or nowhere (Relaxed).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id owner;    // the thread that began the capture
  std::string invalidated;  // why the capture was invalidated; empty while it is valid
};
std::mutex g_capture_mutex;
std::map<const void*, Capture> g_captures;  // by stream handle, from BeginCapture to EndCapture
std::set<const void*> g_graphs, g_graph_execs;

bool capturing(const void* stream) {
  if (stream == nullptr) return false;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  return g_captures.count(stream) != 0;
}

// Records `node` on a capturing stream: cudaSuccess, or the capture's invalidation error.
cudaError_t record(const void* stream, std::function<Status()> node, const char* what) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  Capture& c = g_captures.at(stream);
  if (!c.invalidated.empty())
    return fail(cudaErrorStreamCaptureInvalidated,
                std::string(what) + ": the stream's capture was invalidated by " + c.invalidated);
  c.nodes.push_back(std::move(node));
  return cudaSuccess;
}

void invalidate(const void* stream, const std::string& why) {
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

// Queues `op` on the stream, or records it when the stream is being captured. Returns the error
// to give the caller now.
cudaError_t issue(cudaStream_t stream, std::function<Status()> op, const char* what) {
  if (capturing(stream)) return record(stream, std::move(op), what);
  StreamPtr s = find_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, std::string(what) + ": invalid stream");
  cudaError_t now;
  submit(s, std::move(op), &now);
  return now;
}

// ============================================================================ launches

// Why a launch's configuration is invalid (its error code in *err), or "" when it is valid.
std::string config_error(const void* kernel, const char* name, Dim grid, Dim block, size_t dynamic_smem,
                         cudaError_t* err) {
  *err = cudaErrorInvalidConfiguration;
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

Status run_launch(const LaunchSpec& spec) {
  Status st;
  st.err = execute(spec, &st.detail);
  return st;
}

// ============================================================================ copies and memsets

// The copy itself, when it runs: the bytes, then the initcheck shadow of a device destination.
Status do_copy(void* dst, const void* src, size_t bytes, bool dst_dev, bool src_dev) {
  std::memmove(dst, src, bytes);
  if (dst_dev) {
    Segment* ds = segment_at(reinterpret_cast<uintptr_t>(dst));
    Segment* ss = src_dev ? segment_at(reinterpret_cast<uintptr_t>(src)) : nullptr;
    if (src_dev)
      copy_initialised(ds, reinterpret_cast<uintptr_t>(dst), ss, reinterpret_cast<uintptr_t>(src), bytes);
    else
      mark_initialised(ds, reinterpret_cast<uintptr_t>(dst), bytes);
  }
  return {};
}

// Checks a copy's ranges and direction now, then queues it (records it during a capture). As in
// CUDA, a copy from or to pageable host memory, or a synchronous one (cudaMemcpy), runs before the
// call returns, after the stream's earlier work; copies between the device and page-locked memory
// (cudaHostAlloc) and between device buffers are queued.
cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                 bool sync, const char* what) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection, what);
  if (bytes == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault) {  // unified addressing: where each pointer lives
    std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
    const bool d = segment_holding(reinterpret_cast<uintptr_t>(dst), 1) != nullptr;
    const bool s = segment_holding(reinterpret_cast<uintptr_t>(src), 1) != nullptr;
    kind = d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
             : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const std::string w(what);
  if (dst_dev)
    if (cudaError_t e = check_device_range(dst, bytes, (w + " destination").c_str()); e != cudaSuccess)
      return e;
  if (src_dev)
    if (cudaError_t e = check_device_range(src, bytes, (w + " source").c_str()); e != cudaSuccess) return e;
  auto op = [=] { return do_copy(dst, src, bytes, dst_dev, src_dev); };
  if (capturing(stream)) return record(stream, op, what);
  StreamPtr s = find_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, w + ": invalid stream");
  const bool pageable = (!src_dev && !is_pinned(reinterpret_cast<uintptr_t>(src), bytes)) ||
                        (!dst_dev && !is_pinned(reinterpret_cast<uintptr_t>(dst), bytes));
  if (!sync && !pageable) {
    cudaError_t now;
    submit(s, op, &now);
    return now;
  }
  if (cudaError_t e = run_inline(s, op); e != cudaSuccess) return e;
  return sync ? drain(*s) : cudaSuccess;  // cudaMemcpy also returns earlier asynchronous failures
}

cudaError_t memset_on(void* ptr, int value, size_t bytes, cudaStream_t stream, const char* what) {
  if (cudaError_t e = check_device_range(ptr, bytes, what); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  if (!capturing(stream) && !valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, std::string(what) + ": invalid stream");
  return issue(
      stream,
      [=] {
        std::memset(ptr, value, bytes);
        mark_initialised(segment_at(reinterpret_cast<uintptr_t>(ptr)), reinterpret_cast<uintptr_t>(ptr),
                         bytes);
        return Status{};
      },
      what);
}

// ============================================================================ events

struct EventState {
  std::chrono::steady_clock::time_point t;
};
struct Event {
  StreamPtr stream;  // where it was last recorded
  uint64_t ticket = 0;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
  bool recorded = false;
};

Event* as_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_handle_mutex);
  return g_events.count(e) ? reinterpret_cast<Event*>(e) : nullptr;
}

bool event_done(const Event& e) {
  if (e.stream == nullptr) return true;
  std::lock_guard<std::mutex> lock(e.stream->m);
  return e.stream->completed >= e.ticket;
}

}  // namespace
}  // namespace detail

// ============================================================================ engine API

int launch(const void* kernel, const char* name, Dim grid, Dim block, size_t dynamic_smem, void* stream,
           ThreadBody body, ThreadBody unchecked, std::shared_ptr<void> args, size_t args_bytes) {
  namespace d = detail;
  const double flops = d::take_noted_flops();  // the launcher's note is for this launch only
  cudaStream_t h = static_cast<cudaStream_t>(stream);
  const bool cap = d::capturing(h);
  if (!cap && !d::valid_stream(h))
    return d::fail(cudaErrorInvalidResourceHandle, std::string("launch of ") + name + ": invalid stream");
  cudaError_t err = cudaSuccess;
  const std::string why = d::config_error(kernel, name, grid, block, dynamic_smem, &err);
  if (!why.empty()) {
    if (cap) d::invalidate(h, why);
    return d::fail(err, why);
  }
  unsigned checks = 0;
  std::string bad_setting;
  if (!d::enabled_checks(&checks, &bad_setting)) {
    if (cap) d::invalidate(h, bad_setting);
    return d::fail(cudaErrorInvalidValue, std::string("launch of ") + name + ": " + bad_setting);
  }
  auto spec = std::make_shared<d::LaunchSpec>();
  spec->kernel = kernel;
  spec->name = name;
  spec->grid = grid;
  spec->block = block;
  spec->smem = dynamic_smem;
  spec->body = body;
  spec->unchecked = unchecked;
  spec->args = std::move(args);
  spec->args_bytes = args_bytes;
  spec->checks = checks;
  spec->check_repeats = d::check_repeats();
  spec->flops = flops;
  return d::issue(h, [spec] { return d::run_launch(*spec); }, name);
}

void mark_allocation(void* stream, void* ptr, size_t live_bytes) {
  namespace d = detail;
  d::StreamPtr s = d::find_stream(static_cast<cudaStream_t>(stream));
  if (s == nullptr) return;
  // Queued for execution even while the stream is captured: it belongs to the stream's order, not
  // to the graph.
  cudaError_t ignored;
  d::submit(
      s,
      [ptr, live_bytes] {
        d::Segment* seg = d::segment_at(reinterpret_cast<uintptr_t>(ptr));
        if (seg == nullptr || seg->base != reinterpret_cast<uintptr_t>(ptr)) return d::Status{};
        if (live_bytes > 0) {
          // A block handed out again holds its last user's data: poisoned and uninitialised, as
          // after cudaMalloc.
          std::memset(ptr, 0xFF, std::min(live_bytes, seg->bytes));
          std::memset(seg->init.get(), 0, (seg->capacity + 3) / 4);
        }
        seg->live.store(std::min(live_bytes, seg->bytes), std::memory_order_relaxed);
        seg->cached.store(live_bytes == 0, std::memory_order_relaxed);
        ++d::g_memory_epoch;
        return d::Status{};
      },
      &ignored);
}

int64_t max_blocks() {
  const uint64_t v = detail::env_u64("GPUMAT_EMU_MAX_BLOCKS", 0);
  return v == 0 ? 0 : static_cast<int64_t>(std::min<uint64_t>(v, uint64_t{1} << 31));
}

bool wide_index() { return detail::env_u64("GPUMAT_EMU_WIDE_INDEX", 0) != 0; }

}  // namespace gpumat::emulator

// ============================================================================ runtime API

using gpumat::emulator::detail::fail;
namespace emu = gpumat::emulator::detail;

cudaError_t cudaGetLastError() {
  cudaError_t e = emu::t_last_error;
  emu::t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return emu::t_last_error; }

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
#define GPUMAT_EMU_ERROR_NAME(name, value, text) \
  case name:                                     \
    return #name;
    GPUMAT_EMU_CUDA_ERRORS(GPUMAT_EMU_ERROR_NAME)
#undef GPUMAT_EMU_ERROR_NAME
  }
  return "cudaErrorUnknown";
}

// The generic text, then (on the emulator) the details of the most recent failure on this thread.
const char* cudaGetErrorString(cudaError_t err) {
  static thread_local std::string text;
  text = "emulated CUDA error";
  switch (err) {
#define GPUMAT_EMU_ERROR_TEXT(name, value, message) \
  case name:                                        \
    text = message;                                 \
    break;
    GPUMAT_EMU_CUDA_ERRORS(GPUMAT_EMU_ERROR_TEXT)
#undef GPUMAT_EMU_ERROR_TEXT
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

cudaError_t cudaDeviceSynchronize() {
  if (cudaError_t e = emu::unsafe_during_capture("cudaDeviceSynchronize"); e != cudaSuccess) return e;
  return emu::drain_all(emu::t_device);
}

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
  if (bytes > SIZE_MAX / 4 - 255)  // host_bytes would overflow
    return fail(cudaErrorMemoryAllocation,
                "cudaMalloc of " + std::to_string(bytes) + " bytes: more than the host's address space");
  const size_t rounded = (bytes + 255) / 256 * 256;
  const size_t host = emu::host_bytes(rounded);
  const size_t available = emu::host_memory_available();  // read outside the lock
  {
    // The device's capacity and the host's memory, both charged before anything is allocated.
    std::unique_lock<std::shared_mutex> lock(emu::g_mem_mutex);
    if (bytes > emu::memory_capacity() - emu::g_bytes_in_use[dev])
      return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: " +
                                                 std::to_string(emu::g_bytes_in_use[dev]) + " of " +
                                                 std::to_string(emu::memory_capacity()) + " bytes in use");
    if (host > emu::host_bytes_free(available)) {
      const size_t pending = emu::g_host_pending.load(std::memory_order_relaxed);
      std::string why = "cudaMalloc of " + std::to_string(bytes) +
                        " bytes: the host cannot back it: it needs " + std::to_string(host) +
                        " bytes of host memory (13/4 per byte rounded up to 256: the data, initcheck's and "
                        "racecheck's shadows), and ";
      if (available != SIZE_MAX && host + pending > available)
        why += "the host has " + std::to_string(available) + " bytes available (MemAvailable), " +
               std::to_string(pending) + " of them promised to earlier allocations' shadows";
      else
        why += "the emulated devices' allocations hold " + std::to_string(emu::g_host_charged) + " of the " +
               std::to_string(emu::host_memory_limit()) + " bytes GPUMAT_EMU_HOST_MEMORY_BYTES allows";
      return fail(cudaErrorMemoryAllocation, why);
    }
    emu::g_bytes_in_use[dev] += bytes;
    emu::g_host_charged += host;
    emu::g_host_pending += host;
  }
  void* p = std::aligned_alloc(256, rounded);
  auto seg = std::make_unique<emu::Segment>();
  seg->init.reset(new (std::nothrow) uint8_t[rounded / 4]());
  if (p == nullptr || seg->init == nullptr) {
    std::free(p);
    std::unique_lock<std::shared_mutex> lock(emu::g_mem_mutex);
    emu::g_bytes_in_use[dev] -= bytes;
    emu::g_host_charged -= host;
    emu::g_host_pending -= host;
    return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) +
                                               " bytes: the host is out of memory (its allocation failed)");
  }
  std::memset(p, 0xFF, rounded);  // NaN: uninitialised device memory reads show
  seg->base = reinterpret_cast<uintptr_t>(p);
  seg->bytes = bytes;
  seg->capacity = rounded;
  seg->dev = dev;
  seg->live = bytes;
  std::unique_lock<std::shared_mutex> lock(emu::g_mem_mutex);
  emu::g_segments[seg->base] = std::move(seg);
  emu::g_host_pending -= host - emu::race_shadow_bytes(rounded);  // the data and initcheck's shadow are held
  ++emu::g_memory_epoch;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (cudaError_t e = emu::unsafe_during_capture("cudaFree"); e != cudaSuccess) return e;
  if (ptr == nullptr) return cudaSuccess;
  // As on a GPU, freeing waits for the work queued before it (which may still use the memory).
  for (auto& s : emu::streams_of(-1)) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(s->m);
      ticket = s->enqueued;
    }
    emu::wait_until(*s, ticket);
  }
  std::unique_ptr<emu::Segment> seg;
  {
    std::unique_lock<std::shared_mutex> lock(emu::g_mem_mutex);
    auto it = emu::g_segments.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == emu::g_segments.end())
      return fail(cudaErrorInvalidDevicePointer, "cudaFree of a pointer cudaMalloc did not return");
    emu::g_bytes_in_use[it->second->dev] -= it->second->bytes;
    emu::g_host_charged -= emu::host_bytes(it->second->capacity);
    if (it->second->race.load() == nullptr)
      emu::g_host_pending -= emu::race_shadow_bytes(it->second->capacity);
    seg = std::move(it->second);
    emu::g_segments.erase(it);
    ++emu::g_memory_epoch;
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  *ptr = nullptr;
  if (cudaError_t e = emu::unsafe_during_capture("cudaHostAlloc"); e != cudaSuccess) return e;
  if (flags != cudaHostAllocDefault) return fail(cudaErrorInvalidValue, "cudaHostAlloc: flags not emulated");
  const size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc: the host is out of memory");
  std::unique_lock<std::shared_mutex> lock(emu::g_mem_mutex);
  emu::g_pinned[reinterpret_cast<uintptr_t>(p)] = rounded;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (cudaError_t e = emu::unsafe_during_capture("cudaFreeHost"); e != cudaSuccess) return e;
  if (ptr == nullptr) return cudaSuccess;
  for (auto& s : emu::streams_of(-1)) {  // queued copies may still read or write it
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(s->m);
      ticket = s->enqueued;
    }
    emu::wait_until(*s, ticket);
  }
  {
    std::unique_lock<std::shared_mutex> lock(emu::g_mem_mutex);
    if (emu::g_pinned.erase(reinterpret_cast<uintptr_t>(ptr)) == 0)
      return fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaHostAlloc did not return");
  }
  std::free(ptr);
  return cudaSuccess;
}

// free: what the device's capacity leaves, and at most what the host can back (see host_bytes).
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const size_t available = emu::host_memory_available();
  std::shared_lock<std::shared_mutex> lock(emu::g_mem_mutex);
  *total_bytes = emu::memory_capacity();
  const size_t backed = emu::host_bytes_free(available) / 13 * 4 / 256 * 256;
  *free_bytes = std::min(*total_bytes - emu::g_bytes_in_use[emu::t_device], backed);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = emu::unsafe_during_capture("cudaMemcpy"); e != cudaSuccess) return e;
  return emu::copy(dst, src, bytes, kind, nullptr, /*sync=*/true, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return emu::copy(dst, src, bytes, kind, stream, /*sync=*/false, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                                cudaStream_t stream) {
  if (dst_dev < 0 || dst_dev >= emu::device_count() || src_dev < 0 || src_dev >= emu::device_count())
    return fail(cudaErrorInvalidDevice, "cudaMemcpyPeerAsync");
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (cudaError_t e = emu::unsafe_during_capture("cudaMemset"); e != cudaSuccess) return e;
  return emu::memset_on(ptr, value, bytes, nullptr, "cudaMemset");
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  return emu::memset_on(ptr, value, bytes, stream, "cudaMemsetAsync");
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  auto s = std::make_shared<emu::Stream>();
  s->dev = emu::t_device;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  emu::legacy_stream(s->dev);  // registers the fork handler
  auto* handle = reinterpret_cast<cudaStream_t>(new char(0));
  std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
  emu::g_streams[handle] = std::move(s);
  *stream = handle;
  return cudaSuccess;
}

// As in CUDA, work still queued runs to its end; the stream's resources go with its last operation.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  emu::StreamPtr s;
  {
    std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
    auto it = stream == nullptr ? emu::g_streams.end() : emu::g_streams.find(stream);
    if (it == emu::g_streams.end())
      return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: invalid stream");
    s = std::move(it->second);
    emu::g_streams.erase(it);
  }
  {
    std::lock_guard<std::mutex> lock(s->m);
    s->destroyed = true;
  }
  s->work_cv.notify_all();
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  emu::StreamPtr s = emu::find_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: invalid stream");
  if (cudaError_t e = emu::unsafe_during_capture("cudaStreamSynchronize"); e != cudaSuccess) return e;
  return emu::drain(*s);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  emu::StreamPtr s = emu::find_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: invalid stream");
  {
    std::lock_guard<std::mutex> lock(s->m);
    if (s->completed < s->enqueued) return cudaErrorNotReady;
  }
  return emu::drain(*s);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return fail(cudaErrorInvalidValue, "cudaLaunchHostFunc: no function");
  return emu::issue(
      stream,
      [fn, user_data] {
        fn(user_data);
        return emu::Status{};
      },
      "cudaLaunchHostFunc");
}

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
  emu::Event* e = emu::as_event(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: invalid event");
  {
    std::lock_guard<std::mutex> lock(emu::g_handle_mutex);
    emu::g_events.erase(event);
  }
  delete e;
  return cudaSuccess;
}

// The event completes when the stream's work queued before it has run; its time is the host's then.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  emu::Event* e = emu::as_event(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: invalid event");
  std::shared_ptr<emu::EventState> state = e->state;
  auto stamp = [state] {
    state->t = std::chrono::steady_clock::now();
    return emu::Status{};
  };
  if (emu::capturing(stream)) return emu::record(stream, stamp, "cudaEventRecord");
  emu::StreamPtr s = emu::find_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: invalid stream");
  cudaError_t now;
  e->ticket = emu::submit(s, stamp, &now);
  e->stream = s;
  e->recorded = true;
  return now;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  emu::Event* e = emu::as_event(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize");
  if (cudaError_t err = emu::unsafe_during_capture("cudaEventSynchronize"); err != cudaSuccess) return err;
  if (e->stream != nullptr) emu::wait_until(*e->stream, e->ticket);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  emu::Event* e = emu::as_event(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery");
  return emu::event_done(*e) ? cudaSuccess : cudaErrorNotReady;
}

// Host time between the two records: meaningless as a GPU timing (see emulator.h).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  emu::Event* a = emu::as_event(start);
  emu::Event* b = emu::as_event(end);
  if (a == nullptr || b == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime");
  if (!a->recorded || !b->recorded)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not recorded");
  if (!emu::event_done(*a) || !emu::event_done(*b)) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->state->t - a->state->t).count();
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

// Queues the recorded work, in order, as one operation of the stream; the first failure ends it.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  emu::GraphNodes* e = as_graph(exec, emu::g_graph_execs);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: invalid graph exec");
  if (!emu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: invalid stream");
  if (emu::capturing(stream))
    return fail(cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch into a capturing stream is not emulated");
  auto nodes = std::make_shared<emu::GraphNodes>(*e);  // the exec may be destroyed while this is queued
  return emu::issue(
      stream,
      [nodes] {
        for (const auto& node : *nodes)
          if (emu::Status st = node(); st.err != cudaSuccess) return st;
        return emu::Status{};
      },
      "cudaGraphLaunch");
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
