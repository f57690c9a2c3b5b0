// The emulated device's stand-in for CUDA's <cuda_runtime.h>. The emulated build compiles
// src/cuda/*.cu with the host C++ compiler, -DGPUMAT_EMULATED and -Isrc/emu, so their
// `#include <cuda_runtime.h>` finds this file: the CUDA qualifiers, built-in variables, vector types,
// intrinsics and the runtime API the sources use, mapped onto the emulator (emulator.h says how it
// executes; emulator.cpp implements it). Only what gpumat's kernels and the SGEMM ladder use is here.
#pragma once

#include <cstddef>

// Every memcpy, memmove and memset in the emulated translation units (written so, or std:: ones, or
// the __builtin_ forms that libstdc++'s algorithms use) calls the emulator's checked versions: the
// compiler's instrumentation sees loads and stores, not these calls, and would expand small ones
// inline (the Makefile also passes -fno-builtin-memcpy/-memmove/-memset). Declared before any system
// header, so that their declarations take these assembler names.
// Only with the instrumentation (-fsanitize=thread); the emulator's own sources (GPUMAT_EMU_ENGINE)
// keep the C library's.
#if defined(__SANITIZE_THREAD__) && !defined(GPUMAT_EMU_ENGINE)
extern "C" void* memcpy(void* __restrict dst, const void* __restrict src, size_t n) noexcept
    __asm__("gpumat_emu_memcpy");
extern "C" void* memmove(void* dst, const void* src, size_t n) noexcept __asm__("gpumat_emu_memmove");
extern "C" void* memset(void* dst, int value, size_t n) noexcept __asm__("gpumat_emu_memset");
#define __builtin_memcpy memcpy
#define __builtin_memmove memmove
#define __builtin_memset memset
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emulator.h"

#ifndef GPUMAT_EMULATED
#error "emu/cuda_runtime.h is for the emulated build (-DGPUMAT_EMULATED) only"
#endif

// ---------------------------------------------------------------------------- qualifiers
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// Shared memory: private to the running block, shared by its threads (see emulator.h).
#define __shared__ static thread_local

// ---------------------------------------------------------------------------- vector types
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
// Alignments as CUDA's vector_types.h: a misaligned float4 access is undefined there, and UBSan's
// alignment check reports it here.
struct __align__(8) float2 {
  float x, y;
};
struct float3 {
  float x, y, z;
};
struct __align__(16) float4 {
  float x, y, z, w;
};
struct __align__(8) int2 {
  int x, y;
};
struct int3 {
  int x, y, z;
};
struct __align__(16) int4 {
  int x, y, z, w;
};
struct __align__(8) uint2 {
  unsigned x, y;
};
struct __align__(16) uint4 {
  unsigned x, y, z, w;
};
struct __align__(16) double2 {
  double x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

// ---------------------------------------------------------------------------- built-in variables
// Every emulated thread runs on a fiber stack: one aligned slot of kSlotBytes in an address range the
// emulator reserves, a guard page at its bottom. A table of slot headers beside the range says whose
// stack each slot is. A kernel finds its header from its stack pointer: no thread-local storage
// lookup, and the reads are asm, so the memory checks do not see them.
namespace gpumat::emulator {
struct BlockGeometry {
  uint3 block_idx, block_dim, grid_dim;
};
struct alignas(64) SlotHeader {
  uint3 thread_idx;               // of the thread that owns the stack
  const BlockGeometry* geometry;  // of the block running on the worker that owns the slot
  void* fiber;                    // the engine's state of that thread
  void* worker;                   // the engine's state of the worker
  void* checks;                   // the memory checks' view of the worker's running thread
};
#if defined(__SANITIZE_ADDRESS__)
constexpr unsigned kSlotShift = 21;  // ASan's redzones make frames larger
#else
constexpr unsigned kSlotShift = 18;
#endif
constexpr uintptr_t kSlotBytes = uintptr_t{1} << kSlotShift;
// The slots' range and their headers (set before the first launch).
struct SlotMap {
  uintptr_t lo, size;
  SlotHeader* headers;
};
}  // namespace gpumat::emulator
extern "C" gpumat::emulator::SlotMap gpumat_emu_slots;

namespace gpumat::emulator {
// A load the instrumentation does not see (x86-64 and AArch64; elsewhere the checks ignore the
// slot headers themselves).
template <typename T>
inline T quiet_load(const T* p) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "quiet_load of 4 or 8 bytes");
  T v;
#if defined(__x86_64__)
  asm("mov (%1), %0" : "=r"(v) : "r"(p));
#elif defined(__aarch64__)
  if constexpr (sizeof(T) == 4)
    asm("ldr %w0, [%1]" : "=r"(v) : "r"(p));
  else
    asm("ldr %0, [%1]" : "=r"(v) : "r"(p));
#else
  v = *p;
#endif
  return v;
}
inline uint3 quiet_uint3(const uint3* p) {
  return uint3{quiet_load(&p->x), quiet_load(&p->y), quiet_load(&p->z)};
}
inline uintptr_t stack_pointer() {
  uintptr_t sp;
#if defined(__x86_64__)
  asm("movq %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
  asm("mov %0, sp" : "=r"(sp));
#else
  sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
#endif
  return sp;
}
// The header of the slot the caller runs on (kernels only: host code is not on a slot).
inline SlotHeader* current_slot() {
  return quiet_load(&gpumat_emu_slots.headers) +
         ((stack_pointer() - quiet_load(&gpumat_emu_slots.lo)) >> kSlotShift);
}
inline const BlockGeometry* current_geometry() { return quiet_load(&current_slot()->geometry); }
}  // namespace gpumat::emulator
#define threadIdx (::gpumat::emulator::quiet_uint3(&::gpumat::emulator::current_slot()->thread_idx))
#define blockIdx (::gpumat::emulator::quiet_uint3(&::gpumat::emulator::current_geometry()->block_idx))
#define blockDim (::gpumat::emulator::quiet_uint3(&::gpumat::emulator::current_geometry()->block_dim))
#define gridDim (::gpumat::emulator::quiet_uint3(&::gpumat::emulator::current_geometry()->grid_dim))
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------- synchronisation
// NOTE: the empty asm with a "memory" clobber stops the compiler from keeping shared-memory values in
// registers across the switch to other threads.
inline void __syncthreads() {
  asm volatile("" ::: "memory");
  gpumat::emulator::sync_block();
  asm volatile("" ::: "memory");
}
inline int __syncthreads_count(int pred) {
  asm volatile("" ::: "memory");
  int n = gpumat::emulator::sync_block_count(pred);
  asm volatile("" ::: "memory");
  return n;
}
inline int __syncthreads_and(int pred) {
  return __syncthreads_count(pred) == static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---------------------------------------------------------------------------- warp intrinsics
namespace gpumat::emulator {
template <typename T>
inline uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                "warp shuffle of an unsupported type");
  if constexpr (sizeof(T) == 4)
    return __builtin_bit_cast(uint32_t, v);
  else
    return __builtin_bit_cast(uint64_t, v);
}
template <typename T>
inline T from_bits(uint64_t bits) {
  if constexpr (sizeof(T) == 4)
    return __builtin_bit_cast(T, static_cast<uint32_t>(bits));
  else
    return __builtin_bit_cast(T, bits);
}
// Lane that `lane` reads in a shuffle within segments of `width` lanes, or -1 (keeps its own value).
template <typename T>
inline T shuffle(unsigned mask, T v, int src_in_segment, int width) {
  const int lane = lane_id();
  const int base = lane & ~(width - 1);
  const int src = src_in_segment < 0 ? lane : base + src_in_segment;
  asm volatile("" ::: "memory");
  T out = from_bits<T>(warp_collective(WarpOp::Shuffle, mask, to_bits(v), src));
  asm volatile("" ::: "memory");
  return out;
}
}  // namespace gpumat::emulator

template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize) {
  return gpumat::emulator::shuffle(mask, v, src_lane & (width - 1), width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  const int in_seg = (gpumat::emulator::lane_id() & (width - 1)) + static_cast<int>(delta);
  return gpumat::emulator::shuffle(mask, v, in_seg < width ? in_seg : -1, width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  const int in_seg = (gpumat::emulator::lane_id() & (width - 1)) - static_cast<int>(delta);
  return gpumat::emulator::shuffle(mask, v, in_seg >= 0 ? in_seg : -1, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  const int in_seg = (gpumat::emulator::lane_id() & (width - 1)) ^ lane_mask;
  return gpumat::emulator::shuffle(mask, v, in_seg < width ? in_seg : -1, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  asm volatile("" ::: "memory");
  unsigned r = static_cast<unsigned>(
      gpumat::emulator::warp_collective(gpumat::emulator::WarpOp::Ballot, mask, pred != 0, -1));
  asm volatile("" ::: "memory");
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return (__ballot_sync(mask, pred) & mask) == mask; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  asm volatile("" ::: "memory");
  gpumat::emulator::warp_collective(gpumat::emulator::WarpOp::Sync, mask, 0, -1);
  asm volatile("" ::: "memory");
}
inline unsigned __activemask() { return gpumat::emulator::active_mask(); }

// ---------------------------------------------------------------------------- atomics
// Blocks run concurrently on several workers, so these are real atomic operations.
template <typename T>
inline T gpumat_emu_atomic_update(T* address, T (*f)(T, T), T val) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  Bits* p = reinterpret_cast<Bits*>(address);
  Bits old_bits = __atomic_load_n(p, __ATOMIC_RELAXED);
  for (;;) {
    const T old_v = __builtin_bit_cast(T, old_bits);
    const Bits new_bits = __builtin_bit_cast(Bits, f(old_v, val));
    if (__atomic_compare_exchange_n(p, &old_bits, new_bits, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return old_v;
  }
}
inline float atomicAdd(float* a, float v) {
  return gpumat_emu_atomic_update<float>(a, [](float x, float y) { return x + y; }, v);
}
inline double atomicAdd(double* a, double v) {
  return gpumat_emu_atomic_update<double>(a, [](double x, double y) { return x + y; }, v);
}
inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* a, unsigned v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicSub(unsigned* a, unsigned v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicExch(T* a, T v) {
  return gpumat_emu_atomic_update<T>(a, [](T, T y) { return y; }, v);
}
inline int atomicMax(int* a, int v) {
  return gpumat_emu_atomic_update<int>(a, [](int x, int y) { return x > y ? x : y; }, v);
}
inline int atomicMin(int* a, int v) {
  return gpumat_emu_atomic_update<int>(a, [](int x, int y) { return x < y ? x : y; }, v);
}
inline unsigned atomicMax(unsigned* a, unsigned v) {
  return gpumat_emu_atomic_update<unsigned>(a, [](unsigned x, unsigned y) { return x > y ? x : y; }, v);
}
inline unsigned atomicMin(unsigned* a, unsigned v) {
  return gpumat_emu_atomic_update<unsigned>(a, [](unsigned x, unsigned y) { return x < y ? x : y; }, v);
}
template <typename T>
inline T atomicCAS(T* a, T compare, T val) {
  __atomic_compare_exchange_n(a, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value, whether or not the exchange happened
}
inline int atomicAnd(int* a, int v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }
inline int atomicOr(int* a, int v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }
inline int atomicXor(int* a, int v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }

// ---------------------------------------------------------------------------- min / max
// CUDA declares these overloads at global scope for device code.
#define GPUMAT_EMU_MINMAX(T)                       \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
GPUMAT_EMU_MINMAX(int)
GPUMAT_EMU_MINMAX(unsigned)
GPUMAT_EMU_MINMAX(long)
GPUMAT_EMU_MINMAX(unsigned long)
GPUMAT_EMU_MINMAX(long long)
GPUMAT_EMU_MINMAX(unsigned long long)
#undef GPUMAT_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// ---------------------------------------------------------------------------- other intrinsics
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float_as_int(float x) { return gpumat::emulator::from_bits<int>(gpumat::emulator::to_bits(x)); }
inline float __int_as_float(int x) {
  return gpumat::emulator::from_bits<float>(gpumat::emulator::to_bits(x));
}
inline unsigned __float_as_uint(float x) {
  return gpumat::emulator::from_bits<unsigned>(gpumat::emulator::to_bits(x));
}
inline float __uint_as_float(unsigned x) {
  return gpumat::emulator::from_bits<float>(gpumat::emulator::to_bits(x));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }

// ---------------------------------------------------------------------------- runtime API
// The errors the emulator returns, one line each: the name, CUDA's value and CUDA's text for it
// (cudaGetErrorString; "emulated CUDA error" where the emulator keeps no text of CUDA's). The enum,
// cudaGetErrorName and cudaGetErrorString are made from this one table.
#define GPUMAT_EMU_CUDA_ERRORS(X)                                                                      \
  X(cudaSuccess, 0, "no error")                                                                        \
  X(cudaErrorInvalidValue, 1, "invalid argument")                                                      \
  X(cudaErrorMemoryAllocation, 2, "out of memory")                                                     \
  X(cudaErrorInvalidConfiguration, 9, "invalid configuration argument")                                \
  X(cudaErrorInvalidDevicePointer, 17, "emulated CUDA error")                                          \
  X(cudaErrorInvalidMemcpyDirection, 21, "emulated CUDA error")                                        \
  X(cudaErrorInvalidResourceHandle, 400, "invalid resource handle")                                    \
  X(cudaErrorIllegalState, 401, "the operation cannot be performed in the present state")              \
  X(cudaErrorNotReady, 600, "device not ready")                                                        \
  X(cudaErrorStreamCaptureUnsupported, 900, "operation not permitted when stream is capturing")        \
  X(cudaErrorStreamCaptureInvalidated, 901, "operation failed due to a previous error during capture") \
  X(cudaErrorInvalidDevice, 101, "invalid device ordinal")                                             \
  X(cudaErrorNoDevice, 100, "emulated CUDA error")                                                     \
  X(cudaErrorLaunchFailure, 719, "unspecified launch failure")

enum cudaError_t {
#define GPUMAT_EMU_ERROR_VALUE(name, value, text) name = value,
  GPUMAT_EMU_CUDA_ERRORS(GPUMAT_EMU_ERROR_VALUE)
#undef GPUMAT_EMU_ERROR_VALUE
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;

// CUDA graphs by stream capture: work issued to a capturing stream is recorded, not run, and
// replayed in issue order by cudaGraphLaunch. As on a GPU, calls that could synchronize
// (cudaMalloc, cudaFree, cudaMemcpy, cudaMemset, cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaEventSynchronize) fail with cudaErrorStreamCaptureUnsupported and invalidate the capture:
// on any thread while a cudaStreamCaptureModeGlobal capture runs, on the capturing thread only
// for cudaStreamCaptureModeThreadLocal, never for Relaxed; cudaStreamEndCapture then fails with
// cudaErrorStreamCaptureInvalidated. Graph nodes are kept in one chain (a captured stream is in
// order), so cudaGraphGetNodes only counts them.
struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
using cudaGraphNode_t = CUgraphNode_st*;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int clockRate;
  int major, minor;
  int multiProcessorCount;
  int l2CacheSize;
  int memoryClockRate;
  int memoryBusWidth;
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxGridDimX = 5,
  cudaDevAttrMaxGridDimY = 6,
  cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrClockRate = 13,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t err);
const char* cudaGetErrorString(cudaError_t err);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int dev);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T>
inline cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
// Page-locked host memory: ordinary host memory on the emulator, tracked so that cudaFreeHost of
// anything else fails as on a GPU. Both are unsafe during a capture, as cudaMalloc.
constexpr unsigned cudaHostAllocDefault = 0;
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                                cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
// Runs fn(user_data) on the emulator's thread for the stream, in the stream's order.
using cudaHostFn_t = void (*)(void* user_data);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data);
cudaError_t cudaEventCreate(cudaEvent_t* event);
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* num_nodes);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t gpumat_emu_func_set_attribute(const void* func, cudaFuncAttribute attr, int value);
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F* func, cudaFuncAttribute attr, int value) {
  return gpumat_emu_func_set_attribute(reinterpret_cast<const void*>(func), attr, value);
}

// ---------------------------------------------------------------------------- launches
namespace gpumat::emulator {

// The arguments of a queued launch: the kernel and its parameters, converted to the kernel's
// parameter types once, as the CUDA runtime does at launch (each thread then gets its own copies).
template <typename... Params>
struct LaunchArgs {
  void (*kernel)(Params...);
  std::tuple<std::decay_t<Params>...> params;
};

// Calls the launch's kernel with its own copies of the parameters. Not instrumented: the copies are
// the emulator's plumbing (a GPU's threads read their parameters from a constant bank), and a
// 768-byte multi-tensor table would otherwise cost every thread 200 checked accesses.
template <typename Call, size_t... I>
__attribute__((no_sanitize_thread)) void call_kernel(Call* call, std::index_sequence<I...>) {
  call->kernel(std::get<I>(call->params)...);
}

// Runs Kernel with the parameters of a LaunchArgs block: a kernel's unchecked build (below) runs
// on the block its checked build's launch made. The two builds' parameter types are the same
// source compiled twice (layout-identical; only their namespaces differ).
template <auto Kernel, typename... Params>
void run_with_params(void (*)(Params...), void* args) {
  std::apply(Kernel, static_cast<LaunchArgs<Params...>*>(args)->params);
}
template <auto Kernel>
void run_unchecked(void* args) {
  run_with_params<Kernel>(Kernel, args);
}

// kernel<<<grid, block, smem, stream>>>(args...) on the emulator. `unchecked`: the kernel's build
// without the checks' instrumentation, or nullptr (see GPUMAT_EMU_CHECK_REPEATS in emulator.h).
// Returns the launch's configuration error (also kept for cudaGetLastError()); a fault while the
// kernel runs is returned by the next call that synchronizes with the stream.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), ThreadBody unchecked, const char* name, dim3 grid,
                          dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  using Call = LaunchArgs<Params...>;
  // Kept by the emulator until the launch has run (it is queued), or as long as a graph holds it.
  auto call =
      std::make_shared<Call>(Call{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)});
  ThreadBody body = [](void* c) { call_kernel(static_cast<Call*>(c), std::index_sequence_for<Params...>{}); };
  return static_cast<cudaError_t>(launch(reinterpret_cast<const void*>(kernel), name,
                                         Dim{grid.x, grid.y, grid.z}, Dim{block.x, block.y, block.z}, smem,
                                         stream, body, unchecked, std::move(call), sizeof(Call)));
}

// A launch of a kernel that has no unchecked build: every launch is checked.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  return launch_kernel(kernel, nullptr, name, grid, block, smem, stream, std::forward<Args>(args)...);
}

// "ns::kernel<args>" out of a signature "... [with auto Kernel = ns::kernel<args>]".
inline std::string kernel_name_from_signature(const std::string& s) {
  const size_t start = s.find("Kernel = ");
  if (start == std::string::npos) return s;
  const size_t end = s.rfind(']');
  return s.substr(start + 9, end == std::string::npos || end < start ? std::string::npos : end - start - 9);
}

// The kernel's name for fault reports, from the compiler's signature of this function.
template <auto Kernel>
const char* kernel_name() {
  static const std::string name = kernel_name_from_signature(__PRETTY_FUNCTION__);
  return name.c_str();
}

}  // namespace gpumat::emulator
