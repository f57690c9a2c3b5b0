// CUDA runtime glue: streams, device memory, copies, error translation. See runtime.h.
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <map>
#include <utility>

#include "common.cuh"
#include "gpumat/gpu_matrix.h"
#include "runtime.h"

namespace gpumat::GPUMAT_CUDA_NS {

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky error so the next call starts clean
  std::string message = std::string(what) + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  // Memory the runtime could not get (a launch's resources, the emulator's fiber stacks and
  // shadows) is a MemoryError in Python, as a failed cudaMalloc is; the next call may succeed.
  if (err == cudaErrorMemoryAllocation) throw OutOfMemory(message);
  throw CudaError(message);
}

namespace {
std::mutex g_stream_mutex;
std::vector<cudaStream_t> g_streams;  // one per device, created lazily

int device_count() noexcept;
void synchronize(int dev);
}  // namespace

namespace {
// This thread's capture, if any: its launches on t_capture_dev go to t_capture_stream. Each thread
// keeps one capture stream per device, destroyed when the thread ends.
thread_local int t_capture_dev = -1;
thread_local cudaStream_t t_capture_stream = nullptr;
struct CaptureStreams {
  std::map<int, cudaStream_t> by_device;
  ~CaptureStreams() {
    for (auto& [dev, s] : by_device)
      if (cudaStreamDestroy(s) != cudaSuccess) cudaGetLastError();  // at exit the driver may be gone
  }
};
thread_local CaptureStreams t_capture_streams;
}  // namespace

cudaStream_t activate(int dev) {
  check(cudaSetDevice(dev), "cudaSetDevice");
  if (dev == t_capture_dev) return t_capture_stream;
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  if (g_streams.empty()) g_streams.assign(static_cast<size_t>(device_count()), nullptr);
  if (dev < 0 || dev >= static_cast<int>(g_streams.size()))
    throw CudaError("no CUDA device cuda:" + std::to_string(dev));
  if (g_streams[dev] == nullptr)
    check(cudaStreamCreateWithFlags(&g_streams[dev], cudaStreamNonBlocking), "cudaStreamCreate");
  return g_streams[dev];
}

namespace {

int device_count() noexcept {
  // Queried once: the count cannot change while the process runs, and every array creation asks.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error for the caller
      return 0;
    }
    return n;
  }();
  return count;
}

void* malloc_device(int dev, size_t nbytes) {
  activate(dev);
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, nbytes);
  if (err == cudaErrorMemoryAllocation) {
    const std::string why = cudaGetErrorString(err);  // the emulator's says which limit refused it
    cudaGetLastError();
    throw OutOfMemory("cudaMalloc of " + std::to_string(nbytes) + " bytes failed: " + why);
  }
  check(err, "cudaMalloc");
  return ptr;
}

void free_device(int dev, void* ptr) noexcept {
  if (ptr == nullptr) return;
  if (cudaSetDevice(dev) != cudaSuccess || cudaFree(ptr) != cudaSuccess) cudaGetLastError();
}

void mem_get_info(int dev, size_t* free_bytes, size_t* total_bytes) noexcept {
  *free_bytes = *total_bytes = 0;
  if (cudaSetDevice(dev) != cudaSuccess || cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess)
    cudaGetLastError();
}

// Pinned staging of host-to-device copies. A copy straight from pageable memory has to wait for
// the stream (so that the caller may free `src` when it returns), which makes the host wait for
// every queued kernel: with one mini-batch copied in per training step, the host could not queue
// step k+1 while the device runs step k. Copies up to kStagingMaxBytes are instead copied by the
// host into one of kStagingSlots page-locked buffers and queued with cudaMemcpyAsync; an event
// per buffer marks when the device has read it, and the host waits only when it comes back to a
// buffer whose copy (kStagingSlots copies ago) is still queued. The same idea as PyTorch's
// pin_memory() + non_blocking=True, inside the library (CUDA C++ Best Practices Guide, "Pinned
// Memory" and "Asynchronous and Overlapping Transfers with Computation").
constexpr int kStagingSlots = 4;
constexpr size_t kStagingMaxBytes = size_t{4} << 20;

struct StagingSlot {
  void* host = nullptr;  // page-locked, from cudaHostAlloc
  size_t capacity = 0;
  cudaEvent_t read = nullptr;  // recorded after the copy that last read `host`
};
struct Staging {
  StagingSlot slots[kStagingSlots];
  int next = 0;
};
std::mutex g_staging_mutex;
// Never destroyed (as the streams): the pinned buffers are released with the process, and freeing
// them in a static destructor could run after the CUDA runtime has shut down.
auto* g_staging = new std::map<int, Staging>();

// False (nothing copied) when no page-locked memory can be had: the caller copies from `src`.
bool copy_staged(int dev, cudaStream_t s, void* dst, const void* src, size_t nbytes) {
  std::lock_guard<std::mutex> lock(g_staging_mutex);
  Staging& staging = (*g_staging)[dev];
  StagingSlot& slot = staging.slots[staging.next];
  if (slot.read != nullptr)
    check(cudaEventSynchronize(slot.read), "copy host to device (staging)");
  else
    check(cudaEventCreateWithFlags(&slot.read, cudaEventDisableTiming), "copy host to device (staging)");
  if (slot.capacity < nbytes) {
    if (slot.host != nullptr && cudaFreeHost(slot.host) != cudaSuccess) cudaGetLastError();
    slot.host = nullptr;
    slot.capacity = 0;
    const size_t capacity = (nbytes + 65535) / 65536 * 65536;
    if (cudaHostAlloc(&slot.host, capacity, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      slot.host = nullptr;
      return false;
    }
    slot.capacity = capacity;
  }
  std::memcpy(slot.host, src, nbytes);
  check(cudaMemcpyAsync(dst, slot.host, nbytes, cudaMemcpyHostToDevice, s), "copy host to device");
  check(cudaEventRecord(slot.read, s), "copy host to device (staging)");
  staging.next = (staging.next + 1) % kStagingSlots;
  return true;
}

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

void copy_host_to_device(int dev, void* dst, const void* src, size_t nbytes) {
  cudaStream_t s = activate(dev);
  if (nbytes == 0) return;
  // NOTE: never staged while the stream is captured: the graph would replay a read of the staging
  // buffer. The synchronizing copy below fails the capture instead, which then falls back to eager.
  if (nbytes <= kStagingMaxBytes && !capturing(s) && copy_staged(dev, s, dst, src, nbytes)) return;
  // Pageable source memory: synchronize, so the caller may free `src` and a fault is reported by
  // this copy, not a later op.
  check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s), "copy host to device");
  check(cudaStreamSynchronize(s), "copy host to device");
}

void copy_device_to_host(int dev, void* dst, const void* src, size_t nbytes) {
  cudaStream_t s = activate(dev);
  check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s), "copy device to host");
  check(cudaStreamSynchronize(s), "copy device to host");
}

void copy_device_to_device(int dev, void* dst, const void* src, size_t nbytes) {
  cudaStream_t s = activate(dev);
  check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s), "copy device to device");
}

void copy_peer(int dst_dev, void* dst, int src_dev, const void* src, size_t nbytes) {
  synchronize(src_dev);  // the source's stream may still be writing it
  cudaStream_t s = activate(dst_dev);
  check(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, nbytes, s), "copy between devices");
  check(cudaStreamSynchronize(s), "copy between devices");
}

void synchronize(int dev) { check(cudaStreamSynchronize(activate(dev)), "synchronize"); }

uintptr_t stream_handle(int dev) { return reinterpret_cast<uintptr_t>(activate(dev)); }

void begin_capture(int dev) {
  activate(dev);  // checks the device
  if (t_capture_dev >= 0) throw CudaError("cudaStreamBeginCapture: this thread is already capturing");
  cudaStream_t& s = t_capture_streams.by_device[dev];
  if (s == nullptr) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  // ThreadLocal: calls that may synchronize fail on this thread only; other threads go on.
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  t_capture_dev = dev;
  t_capture_stream = s;
}

void* end_capture(int dev, size_t* nodes) {
  cudaGraph_t graph = nullptr;
  cudaStream_t s = activate(dev);
  t_capture_dev = -1;
  t_capture_stream = nullptr;
  check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  cudaError_t err = cudaGraphGetNodes(graph, nullptr, nodes);
  if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is independent of it
  check(err, "cudaGraphInstantiate");
  return exec;
}

void abort_capture(int dev) noexcept {
  if (dev != t_capture_dev) return;  // this thread captures nothing on `dev`
  cudaStream_t s = t_capture_stream;
  t_capture_dev = -1;
  t_capture_stream = nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaSetDevice(dev) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (cudaStreamIsCapturing(s, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  }
  cudaGetLastError();  // the capture's error is reported by whoever aborted it
}

void graph_destroy(void* exec) noexcept {
  if (exec != nullptr && cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)) != cudaSuccess)
    cudaGetLastError();
}

#ifdef GPUMAT_EMULATED
void mark_block(int dev, void* ptr, size_t nbytes) noexcept {
  try {
    emulator::mark_allocation(activate(dev), ptr, nbytes);
  } catch (...) {  // no stream: the checks keep the block's previous extent
  }
}
#endif

}  // namespace

namespace {
std::recursive_mutex g_workspace_mutex;
// Never destroyed: arrays may be freed during interpreter shutdown, after static destructors.
auto* g_workspaces = new std::map<std::pair<int, int>, GpuMatrix*>();
auto* g_workspace_generation = new std::map<int, uint64_t>();  // per device, under the mutex

uint64_t generation_locked(int dev) {
  auto it = g_workspace_generation->find(dev);
  return it == g_workspace_generation->end() ? 0 : it->second;
}

uint64_t workspace_generation(int dev) noexcept {
  std::lock_guard<std::recursive_mutex> lock(g_workspace_mutex);
  return generation_locked(dev);
}

bool graph_launch(int dev, void* exec, uint64_t workspaces) {
  std::lock_guard<std::recursive_mutex> lock(g_workspace_mutex);
  if (generation_locked(dev) != workspaces) return false;
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), activate(dev)), "cudaGraphLaunch");
  return true;
}
}  // namespace

std::unique_lock<std::recursive_mutex> workspace_lock() {
  return std::unique_lock<std::recursive_mutex>(g_workspace_mutex);
}

float* workspace(int dev, int slot, int64_t floats) {
  GpuMatrix*& ws = (*g_workspaces)[{dev, slot}];
  if (ws == nullptr || ws->size() < floats) {
    // NOTE: freeing the smaller buffer is safe with kernels still queued: the device runs its one
    // stream in order, and every later user of the block is queued after them.
    delete ws;
    ws = nullptr;
    ws = new GpuMatrix({floats}, kernel_device(dev));
    ++(*g_workspace_generation)[dev];  // graphs captured with the old block are stale now
  }
  return ws->data();
}

unsigned* block_ticket(int dev) {
  static auto* tickets = new std::map<int, GpuMatrix*>();  // never destroyed, as the workspaces
  GpuMatrix*& t = (*tickets)[dev];
  if (t == nullptr) {
    auto fresh = std::make_unique<GpuMatrix>(std::vector<int64_t>{kBlockTickets}, kernel_device(dev));
    check(cudaMemsetAsync(fresh->data(), 0, kBlockTickets * sizeof(unsigned), activate(dev)), "block_ticket");
    t = fresh.release();
  }
  return reinterpret_cast<unsigned*>(t->data());
}

GridLimits grid_limits(int dev) {
  int x = 0, y = 0;
  check(cudaDeviceGetAttribute(&x, cudaDevAttrMaxGridDimX, dev), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&y, cudaDevAttrMaxGridDimY, dev), "cudaDeviceGetAttribute");
  return {x, y};
}

const DeviceRuntime& runtime() {
  static const DeviceRuntime table = [] {
    DeviceRuntime t{};
    t.device_count = device_count;
    t.malloc_device = malloc_device;
    t.free_device = free_device;
    t.mem_get_info = mem_get_info;
    t.copy_host_to_device = copy_host_to_device;
    t.copy_device_to_host = copy_device_to_host;
    t.copy_device_to_device = copy_device_to_device;
    t.copy_peer = copy_peer;
    t.synchronize = synchronize;
    t.stream_handle = stream_handle;
    t.begin_capture = begin_capture;
    t.end_capture = end_capture;
    t.abort_capture = abort_capture;
    t.graph_launch = graph_launch;
    t.graph_destroy = graph_destroy;
#ifdef GPUMAT_EMULATED
    t.mark_block = mark_block;
#endif
    t.workspace_generation = workspace_generation;
    return t;
  }();
  return table;
}

}  // namespace gpumat::GPUMAT_CUDA_NS
