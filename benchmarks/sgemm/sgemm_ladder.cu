// sgemm_ladder.cu: a self-contained FP32 SGEMM ladder for gpumat, in the style of
// llm.c's dev/cuda: every step of the tuning is a kernel of its own, checked against cuBLAS
// (FP32, no TF32) and a float64 CPU reference, then timed against cuBLAS with CUDA events.
//
// Problem (row-major, as libgpumat's matmul): c (m, n) = op(a) @ op(b), op = transpose when the
// flag is set; a is (m, k) or (k, m) when trans_a, b is (k, n) or (n, k) when trans_b.
//
// Kernels (select with --kernels; "5:S" forces split-K S on kernel 5):
//   0  naive: one thread per output, k loop over global memory.
//   1  libgpumat's current tiled kernel, copied verbatim from extensions/src/cuda/matmul.cu:
//      64x64 block tile, BK=16, 256 threads, 4x4 outputs per thread strided by 16, scalar loads.
//   2  128x128 block tile, BK=8, 256 threads, 8x8 contiguous outputs per thread; both operands
//      stored k-major in shared memory (op(a) transposed), float4 global loads, LDS.128 fragments.
//   3  + warp tiling: BK=16, each warp owns a 32x64 sub-tile, each thread 8x8 as 2x2 sub-tiles of
//      4x4 strided by the lane grid, so a warp's LDS.128s read contiguous 64/128-byte runs (no bank
//      conflicts) and stores are 128-byte rows; conflict-free transposing stores for k-contiguous
//      operands. Single shared-memory buffer, two barriers per k step.
//   4  + double buffering: two shared-memory stages, one barrier per k step; every tile load is a
//      cp.async (LDGSTS, sm_80+) issued a whole tile ahead: operands contiguous along m/n (a^T, b)
//      land directly in the stage, operands contiguous along k (a, b^T) land in per-thread staging
//      slots that the same thread transposes into the stage after the compute (no registers held
//      across the compute); grouped block order for L2 reuse. Before sm_80: register prefetch.
//   5  small tile + split-K for skinny shapes (MNIST): the kernel-4 pipeline on a 64x64 tile with
//      128 threads (8x4 per thread); blockIdx.y splits k; partial tiles go to a workspace and a
//      second kernel sums them in a fixed order (deterministic).
//   6  dispatcher: picks the tile and split per shape (what libgpumat's matmul() would do).
//   7  kernel 4 on a 128x256 tile, 8x16 per thread (one block per SM, more reuse per load).
//
// Every tuned kernel exists for all four transpose cases (template TransA/TransB) and for two
// load paths: Vec (float4 / cp.async of 16 bytes; needs 16-byte aligned pointers and the
// contiguous dimension of a, b and c to be a multiple of 4) and a guarded scalar path otherwise.
// Out-of-range elements load as 0 and out-of-range outputs are not stored: any m, n, k >= 0.
//
// Build: make (see Makefile), or
//   nvcc -O3 -std=c++17 -arch=sm_90 -Xcompiler -fopenmp sgemm_ladder.cu -lcublas -lgomp -o sgemm_ladder
// Without a GPU: make emulate builds this file with the host compiler against gpumat's CUDA
// emulator (extensions/src/emu) and runs the correctness checks there (float64 reference only, no
// cuBLAS; cp.async through the emulator's fallback; timings are not taken: they would mean nothing).
// Run:   ./sgemm_ladder --shapes mnist --shapes 4096 --json out.json
//        ./sgemm_ladder --shapes edge --check-only --misalign       (what `make check` runs)

#ifndef GPUMAT_EMULATED
#include <cublas_v2.h>
#endif
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

// ============================================================================ error checks

#define CUDA_CHECK(call)                                                                             \
  do {                                                                                               \
    cudaError_t err_ = (call);                                                                       \
    if (err_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(err_),             \
                   cudaGetErrorString(err_), __FILE__, __LINE__, #call);                             \
      std::exit(2);                                                                                  \
    }                                                                                                \
  } while (0)

#define CUBLAS_CHECK(call)                                                                           \
  do {                                                                                               \
    cublasStatus_t st_ = (call);                                                                     \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                              \
      std::fprintf(stderr, "cuBLAS error %d at %s:%d: %s\n", static_cast<int>(st_), __FILE__,       \
                   __LINE__, #call);                                                                 \
      std::exit(2);                                                                                  \
    }                                                                                                \
  } while (0)

// After every launch: a bad configuration or a missing kernel image shows up here.
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Every launch goes through this macro: SGEMM_LAUNCH(kernel, grid, block, smem, stream)(args...):
// the <<<>>> launch under nvcc, gpumat's CUDA emulator otherwise.
#ifndef GPUMAT_EMULATED
#define SGEMM_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#else
template <typename Kernel>
struct EmulatedLaunch {
  Kernel* kernel;
  const char* name;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <typename... Args>
  void operator()(Args... args) const {
    gpumat::emulator::launch_kernel(kernel, name, grid, block, smem, stream, args...);
  }
};
#define SGEMM_LAUNCH(kernel, grid, block, smem, stream) \
  EmulatedLaunch<std::remove_pointer_t<decltype(+kernel)>>{kernel, #kernel, dim3(grid), dim3(block), smem, stream}
#endif

// ============================================================================ kernel 0: naive
// One thread per output element; x along n so that c stores (and b loads when b is (k, n)) coalesce.

namespace naive {
constexpr int kBX = 32, kBY = 8;

// a is (m, k) or (k, m) when TransA; b is (k, n) or (n, k) when TransB; c is (m, n).
template <bool TransA, bool TransB>
__global__ void sgemm_naive_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                   int m, int n, int k) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) {
    const float av = TransA ? a[static_cast<int64_t>(p) * m + row] : a[static_cast<int64_t>(row) * k + p];
    const float bv = TransB ? b[static_cast<int64_t>(col) * k + p] : b[static_cast<int64_t>(p) * n + col];
    acc = fmaf(av, bv, acc);
  }
  c[static_cast<int64_t>(row) * n + col] = acc;
}

void launch(const float* a, bool ta, const float* b, bool tb, float* c, int m, int n, int k, cudaStream_t s) {
  if (m == 0 || n == 0) return;
  dim3 grid(static_cast<unsigned>(ceil_div(n, kBX)), static_cast<unsigned>(ceil_div(m, kBY)));
  dim3 block(kBX, kBY);
  auto kernel = !ta ? (!tb ? sgemm_naive_kernel<false, false> : sgemm_naive_kernel<false, true>)
                    : (!tb ? sgemm_naive_kernel<true, false> : sgemm_naive_kernel<true, true>);
  SGEMM_LAUNCH(kernel, grid, block, 0, s)(a, b, c, m, n, k);
  LAUNCH_CHECK();
}
}  // namespace naive

// ============================================================================ kernel 1: library baseline
// Copied verbatim from extensions/src/cuda/matmul.cu (commit b76cf27); only the namespace and
// the launcher (stream passed in, our check macro) differ.
// Tiling: each 16x16 block computes a 64x64 tile of c, each thread a 4x4 register tile strided
// by 16. The k loop stages a 64x16 slice of op(a) and a 16x64 slice of op(b) in shared memory.

namespace baseline {
constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kThreadsX = 16, kThreadsY = 16;  // 256 threads
constexpr int kTM = kBM / kThreadsY, kTN = kBN / kThreadsX;
constexpr int kThreads = kThreadsX * kThreadsY;

// a is (m, k) or (k, m) when TransA; b is (k, n) or (n, k) when TransB; c is (m, n).
template <bool TransA, bool TransB>
__global__ void __launch_bounds__(kThreads)
    matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                        int m, int n, int k) {
  __shared__ float as[kBK][kBM];  // as[kk][row] = op(a)[row0 + row, k0 + kk]
  __shared__ float bs[kBK][kBN];  // bs[kk][col] = op(b)[k0 + kk, col0 + col]
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kThreadsX + tx;
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  float acc[kTM][kTN] = {};

  for (int k0 = 0; k0 < k; k0 += kBK) {
#pragma unroll
    for (int l = tid; l < kBM * kBK; l += kThreads) {
      // contiguous axis first: k for a (m, k) a, m for a stored (k, m)
      int kk = TransA ? l / kBM : l % kBK;
      int row = TransA ? l % kBM : l / kBK;
      int gr = row0 + row, gk = k0 + kk;
      float v = 0.0f;
      if (gr < m && gk < k) v = TransA ? a[static_cast<int64_t>(gk) * m + gr] : a[static_cast<int64_t>(gr) * k + gk];
      as[kk][row] = v;
    }
#pragma unroll
    for (int l = tid; l < kBN * kBK; l += kThreads) {
      // contiguous axis first: n for a (k, n) b, k for a stored (n, k)
      int kk = TransB ? l % kBK : l / kBN;
      int col = TransB ? l / kBK : l % kBN;
      int gc = col0 + col, gk = k0 + kk;
      float v = 0.0f;
      if (gc < n && gk < k) v = TransB ? b[static_cast<int64_t>(gc) * k + gk] : b[static_cast<int64_t>(gk) * n + gc];
      bs[kk][col] = v;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float ra[kTM], rb[kTN];
#pragma unroll
      for (int i = 0; i < kTM; ++i) ra[i] = as[kk][ty + i * kThreadsY];
#pragma unroll
      for (int j = 0; j < kTN; ++j) rb[j] = bs[kk][tx + j * kThreadsX];
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    int r = row0 + ty + i * kThreadsY;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      int cc = col0 + tx + j * kThreadsX;
      if (cc < n) c[static_cast<int64_t>(r) * n + cc] = acc[i][j];
    }
  }
}

void launch(const float* a, bool trans_a, const float* b, bool trans_b, float* c, int m, int n, int k,
            cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  dim3 grid(static_cast<unsigned>(ceil_div(n, kBN)), static_cast<unsigned>(ceil_div(m, kBM)));
  dim3 block(kThreadsX, kThreadsY);
  auto kernel = !trans_a ? (!trans_b ? matmul_tiled_kernel<false, false> : matmul_tiled_kernel<false, true>)
                         : (!trans_b ? matmul_tiled_kernel<true, false> : matmul_tiled_kernel<true, true>);
  SGEMM_LAUNCH(kernel, grid, block, 0, stream)(a, b, c, m, n, k);
  LAUNCH_CHECK();
}
}  // namespace baseline

// ============================================================================ shared pieces of kernels 2..7
// Everything from here to the end of kernel 7 is what moves into extensions/src/cuda/matmul.cu.
//
// Operand abstraction. Both operands are "an (MN, K) matrix op(X) read in tiles of BMN x BK":
//   for a: MN = m, op(X)[i][p] = TransA ? a[p * m + i] : a[i * k + p]
//   for b: MN = n, op(X)[i][p] = TransB ? b[i * k + p] : b[p * n + i]   (op(b) transposed)
// so an operand is either k-contiguous (a, b^T: X[i * ld + p], ld = k) or mn-contiguous
// (a^T, b: X[p * ld + i], ld = mn). Shared memory always holds the tile k-major,
// s[p * (BMN + kPad) + i], so that the compute loop reads 4 consecutive i with one LDS.128.

namespace tuned {

constexpr int kPad = 4;  // floats of padding per shared-memory row: keeps rows 16-byte aligned and
                         // makes the transposing stores of k-contiguous operands conflict-free

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// cp.async of 16 bytes, global -> shared, bypassing L1 (.cg); src_bytes = 0 writes 16 zero bytes and
// reads nothing (used for out-of-range chunks). sm_80+ only; callers check kHasCpAsync.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes));
#elif defined(GPUMAT_EMULATED)  // portable fallback: the emulator delivers the copy at the wait
  gpumat::emulator::cp_async(smem, gmem, 16, valid ? 16 : 0);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#elif defined(GPUMAT_EMULATED)
  gpumat::emulator::cp_async_commit();
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#elif defined(GPUMAT_EMULATED)
  gpumat::emulator::cp_async_wait(0);
#endif
}

// The block's dynamic shared memory (16-byte aligned: LDS.128 and cp.async need it).
__device__ __forceinline__ float* dynamic_smem() {
#ifdef GPUMAT_EMULATED
  return static_cast<float*>(gpumat::emulator::dynamic_smem());
#else
  extern __shared__ float4 smem4[];
  return reinterpret_cast<float*>(smem4);
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr bool kHasCpAsync = false;
#else
constexpr bool kHasCpAsync = true;  // host pass and sm_80+ device passes
#endif

// Loads one BMN x BK tile of op(X) (rows [mn0, mn_end) and k range [k0, k_end) are valid) and
// stores it k-major into shared memory. NT threads; each owns kPerThread chunks (float4 when Vec,
// single floats otherwise) held in registers between load() and store(), so a caller can issue the
// global loads of tile t+1 before computing tile t (register prefetch).
template <int BMN, int BK, int NT, bool KContig, bool Vec>
struct TileLoader {
  static constexpr int kLds = BMN + kPad;           // shared-memory row length (floats)
  static constexpr int kElems = BMN * BK;
  static constexpr int kWidth = Vec ? 4 : 1;        // floats per chunk
  static constexpr int kPerThread = kElems / (NT * kWidth);
  static constexpr int kCpr = BK / 4;               // float4 chunks per row of a k-contiguous tile
  static_assert(kElems % (NT * kWidth) == 0, "tile must split evenly over the threads");
  static_assert(BMN % 16 == 0 && BK % 4 == 0, "tile sizes");

  float reg[kPerThread * kWidth];

  // Chunk c of the tile -> (i, p) its first element, p along k.
  // k-contiguous, Vec: lanes 0-15 take 16 rows at one float4 column, lanes 16-31 the next column, so a
  // warp reads 32 contiguous bytes per row (whole sectors) and its transposing stores s[p][i] hit
  // 32 distinct banks (column c and c+1 are 4*kLds = 16 mod 32 banks apart).
  __device__ __forceinline__ static void chunk_pos(int c, int& i, int& p) {
    if (Vec) {
      if (KContig) {
        p = ((c >> 4) % kCpr) * 4;
        i = (c & 15) + (c / (16 * kCpr)) * 16;
      } else {
        p = c / (BMN / 4);
        i = (c % (BMN / 4)) * 4;
      }
    } else {
      if (KContig) {  // consecutive threads along k: the contiguous axis
        p = c % BK;
        i = c / BK;
      } else {
        p = c / BMN;
        i = c % BMN;
      }
    }
  }

  // Offset of element (i, p) from the tile origin. 32-bit: the launchers keep BMN * ld < 2^31.
  __device__ __forceinline__ static int offset(int ld, int i, int p) { return KContig ? i * ld + p : p * ld + i; }

  // Global -> registers. `tile` points at op(X)[mn0][k0] (the tile origin, a valid element);
  // rows i < mn_left and k offsets p < k_left are in range, the rest load as zero. With Vec, the
  // contiguous dimension is a multiple of 4 and chunks start at multiples of 4, so a chunk is
  // either all in range or all out.
  __device__ __forceinline__ void load(const float* __restrict__ tile, int ld, int mn_left, int k_left, int tid) {
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      int i, p;
      chunk_pos(tid + r * NT, i, p);
      const bool valid = i < mn_left && p < k_left;
      if (Vec) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (valid) v = __ldg(reinterpret_cast<const float4*>(tile + offset(ld, i, p)));
        reg[4 * r + 0] = v.x;
        reg[4 * r + 1] = v.y;
        reg[4 * r + 2] = v.z;
        reg[4 * r + 3] = v.w;
      } else {
        reg[r] = valid ? __ldg(tile + offset(ld, i, p)) : 0.0f;
      }
    }
  }

  // Registers -> shared memory (k-major). k-contiguous float4 chunks are transposed on the way.
  __device__ __forceinline__ void store(float* __restrict__ s, int tid) const {
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      int i, p;
      chunk_pos(tid + r * NT, i, p);
      if (Vec && KContig) {
#pragma unroll
        for (int j = 0; j < 4; ++j) s[(p + j) * kLds + i] = reg[4 * r + j];
      } else if (Vec) {
        *reinterpret_cast<float4*>(&s[p * kLds + i]) =
            make_float4(reg[4 * r + 0], reg[4 * r + 1], reg[4 * r + 2], reg[4 * r + 3]);
      } else {
        s[p * kLds + i] = reg[r];
      }
    }
  }

  // Global -> shared directly with cp.async (mn-contiguous Vec operands only: the layouts match).
  __device__ __forceinline__ static void copy_async(float* __restrict__ s, const float* __restrict__ tile, int ld,
                                                    int mn_left, int k_left, int tid) {
    static_assert(Vec && !KContig, "cp.async needs the shared layout to equal the global one");
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      int i, p;
      chunk_pos(tid + r * NT, i, p);
      const bool valid = i < mn_left && p < k_left;
      cp_async16(&s[p * kLds + i], valid ? tile + offset(ld, i, p) : tile, valid);
    }
  }

  // k-contiguous Vec operands cannot land k-major by cp.async (each float4 holds 4 k of one row).
  // They go by cp.async into this thread's own staging slots (float4 slot r*NT + tid: a warp's
  // writes and reads are 512 contiguous bytes), and after cp_async_wait_all the same thread moves
  // them, transposed, into the k-major stage (unstage). No barrier is needed between the two: a
  // thread's completed cp.async writes are visible to itself. Nothing is held in registers while
  // the copy is in flight.
  static constexpr int kStagingFloats = KContig && Vec ? kElems : 0;

  __device__ __forceinline__ static void copy_async_staged(float* __restrict__ staging, const float* __restrict__ tile,
                                                           int ld, int mn_left, int k_left, int tid) {
    static_assert(Vec && KContig, "staging is for k-contiguous float4 chunks");
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      int i, p;
      chunk_pos(tid + r * NT, i, p);
      const bool valid = i < mn_left && p < k_left;
      cp_async16(&staging[4 * (r * NT + tid)], valid ? tile + offset(ld, i, p) : tile, valid);
    }
  }

  __device__ __forceinline__ static void unstage(float* __restrict__ s, const float* __restrict__ staging, int tid) {
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      int i, p;
      chunk_pos(tid + r * NT, i, p);
      const float4 v = *reinterpret_cast<const float4*>(&staging[4 * (r * NT + tid)]);
      s[(p + 0) * kLds + i] = v.x;
      s[(p + 1) * kLds + i] = v.y;
      s[(p + 2) * kLds + i] = v.z;
      s[(p + 3) * kLds + i] = v.w;
    }
  }
};

// Stores 4 consecutive outputs v[0..3] at c[row][col..col+3] (ld = n): one float4 store when Vec
// (n % 4 == 0 and c 16-byte aligned, so the group is all in or all out), else guarded scalars.
template <bool Vec>
__device__ __forceinline__ void store4(float* __restrict__ c, int ld, int row, int col, int m, int n,
                                       const float* v) {
  if (row >= m) return;
  float* dst = c + static_cast<int64_t>(row) * ld + col;
  if (Vec) {
    if (col < n) *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (col + j < n) dst[j] = v[j];
  }
}

// True when the float4 paths may be used: 16-byte aligned pointers and every contiguous dimension
// a multiple of 4 (rows then start 16-byte aligned too).
inline bool can_vectorize(const float* a, bool ta, const float* b, bool tb, const float* c, int m, int n,
                          int k) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(a) && aligned(b) && aligned(c) && (ta ? m % 4 == 0 : k % 4 == 0) &&
         (tb ? k % 4 == 0 : n % 4 == 0) && n % 4 == 0;
}

// The tuned kernels address a tile with 32-bit offsets from a 64-bit tile origin (fewer registers):
// that needs tile_rows * ld < 2^31 for both operands, i.e. ld below 16M floats for a 128-row tile.
// (In libgpumat this becomes a ShapeError, or a fall back to the baseline kernel.)
inline void require_32bit_tile_offsets(int tile_rows, bool ta, bool tb, int m, int n, int k, const char* who) {
  const int64_t ld = std::max<int64_t>(ta ? m : k, tb ? k : n);
  if (static_cast<int64_t>(tile_rows) * (ld + 1) >= (int64_t{1} << 31)) {
    std::fprintf(stderr, "%s: leading dimension %lld too large for 32-bit tile offsets\n", who,
                 static_cast<long long>(ld));
    std::exit(2);
  }
}

// ============================================================================ kernel 2: 128x128 block tile, 8x8 per thread
// Tiling: a 256-thread block computes a 128x128 tile of c; thread (ty, tx) of a 16x16 grid owns the
// contiguous 8x8 outputs at rows ty*8.., cols tx*8... Per k step it reads 8 values of op(a) and 8
// of op(b) with two LDS.128 each (both tiles k-major in shared memory, op(a) transposed on the way
// in) and does 64 FMAs: 16 FMAs per shared load instead of kernel 1's 2. BK = 8, one buffer.
// Known weakness (fixed in kernel 3): the 16 tx of a warp read op(b) at a 32-byte stride, a
// 2-way bank conflict on every LDS.128 of b.

namespace k2 {
constexpr int kBM = 128, kBN = 128, kBK = 8, kT = 8, kThreads = 256;

template <bool TransA, bool TransB, bool Vec>
__global__ void __launch_bounds__(kThreads)
    sgemm_blocktile_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int m,
                           int n, int k) {
  using LoadA = TileLoader<kBM, kBK, kThreads, !TransA, Vec>;
  using LoadB = TileLoader<kBN, kBK, kThreads, TransB, Vec>;
  __shared__ __align__(16) float as[kBK * LoadA::kLds];  // as[p][i] = op(a)[row0 + i][k0 + p]
  __shared__ __align__(16) float bs[kBK * LoadB::kLds];  // bs[p][j] = op(b)[k0 + p][col0 + j]
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  const int lda = TransA ? m : k, ldb = TransB ? k : n;
  LoadA la;
  LoadB lb;
  float acc[kT][kT] = {};

  // tile origins, advanced by one k step per iteration
  const float* a_tile = TransA ? a + row0 : a + static_cast<int64_t>(row0) * lda;
  const float* b_tile = TransB ? b + static_cast<int64_t>(col0) * ldb : b + col0;
  const int a_step = TransA ? kBK * lda : kBK;  // 32-bit: the launcher keeps tile * ld < 2^31
  const int b_step = TransB ? kBK : kBK * ldb;

  for (int k0 = 0; k0 < k; k0 += kBK, a_tile += a_step, b_tile += b_step) {
    la.load(a_tile, lda, m - row0, k - k0, tid);
    lb.load(b_tile, ldb, n - col0, k - k0, tid);
    la.store(as, tid);
    lb.store(bs, tid);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kBK; ++p) {
      float ra[kT], rb[kT];
#pragma unroll
      for (int q = 0; q < kT; q += 4) {
        const float4 va = *reinterpret_cast<const float4*>(&as[p * LoadA::kLds + ty * kT + q]);
        const float4 vb = *reinterpret_cast<const float4*>(&bs[p * LoadB::kLds + tx * kT + q]);
        ra[q] = va.x, ra[q + 1] = va.y, ra[q + 2] = va.z, ra[q + 3] = va.w;
        rb[q] = vb.x, rb[q + 1] = vb.y, rb[q + 2] = vb.z, rb[q + 3] = vb.w;
      }
#pragma unroll
      for (int i = 0; i < kT; ++i)
#pragma unroll
        for (int j = 0; j < kT; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kT; ++i)
#pragma unroll
    for (int q = 0; q < kT; q += 4) store4<Vec>(c, n, row0 + ty * kT + i, col0 + tx * kT + q, m, n, &acc[i][q]);
}

void launch(const float* a, bool ta, const float* b, bool tb, float* c, int m, int n, int k, cudaStream_t s) {
  if (m == 0 || n == 0) return;
  require_32bit_tile_offsets(std::max(kBM, kBN), ta, tb, m, n, k, "kernel 2");
  dim3 grid(static_cast<unsigned>(ceil_div(n, kBN)), static_cast<unsigned>(ceil_div(m, kBM)));
  const bool vec = can_vectorize(a, ta, b, tb, c, m, n, k);
#define K2_LAUNCH(TA, TB, V)                                        \
  do {                                                              \
    auto kernel = sgemm_blocktile_kernel<TA, TB, V>;                \
    SGEMM_LAUNCH(kernel, grid, kThreads, 0, s)(a, b, c, m, n, k);   \
  } while (0)
  if (vec) {
    if (!ta && !tb) K2_LAUNCH(false, false, true);
    else if (!ta && tb) K2_LAUNCH(false, true, true);
    else if (ta && !tb) K2_LAUNCH(true, false, true);
    else K2_LAUNCH(true, true, true);
  } else {
    if (!ta && !tb) K2_LAUNCH(false, false, false);
    else if (!ta && tb) K2_LAUNCH(false, true, false);
    else if (ta && !tb) K2_LAUNCH(true, false, false);
    else K2_LAUNCH(true, true, false);
  }
#undef K2_LAUNCH
  LAUNCH_CHECK();
}
}  // namespace k2

// ============================================================================ kernels 3, 4, 5, 7: warp-tiled SGEMM
// Tiling: a block of NT = 32 * (BM/WM) * (BN/WN) threads computes a BM x BN tile of c; warp
// (warp_m, warp_n) owns a WM x WN sub-tile; its 32 lanes form an LM x LN grid (LM = WM/TM,
// LN = WN/TN, LM*LN = 32) and lane (lm, ln) owns TM x TN outputs as (TM/4) x (TN/4) sub-tiles of
// 4x4 at rows warp_m*WM + s*LM*4 + lm*4 + (0..3) and cols warp_n*WN + t*LN*4 + ln*4 + (0..3).
// Per k step a thread reads TM/4 + TN/4 float4 fragments (LDS.128; a warp's reads of one fragment
// are LM or LN consecutive float4s, conflict-free) and does TM*TN FMAs.
// kStages = 1 (kernel 3): load registers -> shared, barrier, compute, barrier.
// kStages = 2 (kernels 4, 5, 7): two shared-memory stages; during the compute of tile t, tile t+1
// arrives by cp.async, straight into the stage (mn-contiguous operands) or into staging slots
// transposed after the compute (k-contiguous operands); one barrier per tile. Before sm_80 the
// same flow prefetches into registers. The scalar (unaligned) path always takes the kStages = 1 flow.
// Split-K: blockIdx.y takes k range [y*k_chunk, min(k, (y+1)*k_chunk)); with gridDim.y > 1 the
// tile goes to ws + y*m*n (a (splits, m, n) workspace) and splitk_reduce sums the slices.
// Block order: blockIdx.x walks groups of kGroupM block rows column by column, so that the blocks
// resident at one time share a few rows of a and columns of b in L2.

template <int BM_, int BN_, int BK_, int WM_, int WN_, int TM_, int TN_, int Stages_, int MinBlocks_>
struct TileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, TM = TM_, TN = TN_;
  static constexpr int kStages = Stages_, kMinBlocks = MinBlocks_;
  static constexpr int kThreads = 32 * (BM / WM) * (BN / WN);
  static constexpr int LM = WM / TM, LN = WN / TN;
  static constexpr int kLdsA = BM + kPad, kLdsB = BN + kPad;
  static constexpr int kStageFloats = kStages * BK * (kLdsA + kLdsB);
  // kernel 4's staging for k-contiguous operands (a unless transposed, b when transposed)
  static constexpr size_t smem_bytes(bool stage_a, bool stage_b) {
    return sizeof(float) * (kStageFloats + (kStages == 2 ? (stage_a ? BM * BK : 0) + (stage_b ? BN * BK : 0) : 0));
  }
  static_assert(LM * LN == 32, "a warp's lanes must tile its sub-tile exactly");
  static_assert(BM % WM == 0 && BN % WN == 0 && TM % 4 == 0 && TN % 4 == 0, "tile shape");
  static_assert(kStages == 1 || kStages == 2, "one or two shared-memory stages");
};

//                          BM   BN  BK  WM   WN  TM  TN  stages  min blocks/SM
using Cfg3 = TileConfig<128, 128, 16, 32, 64, 8, 8, 1, 2>;     // kernel 3: 256 threads, 34 KB smem... (1 stage: 17 KB)
using Cfg4 = TileConfig<128, 128, 16, 32, 64, 8, 8, 2, 2>;     // kernel 4: 256 threads, 34 KB smem
using Cfg5 = TileConfig<64, 64, 16, 32, 32, 8, 4, 2, 4>;       // kernel 5: 128 threads, 17 KB smem
using Cfg7 = TileConfig<128, 256, 16, 32, 128, 8, 16, 2, 1>;   // kernel 7: 256 threads, 50 KB smem

constexpr int kGroupM = 8;

template <class Cfg, bool TransA, bool TransB, bool Vec>
__global__ void __launch_bounds__(Cfg::kThreads, Vec ? Cfg::kMinBlocks : 1)
    sgemm_warptile_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                          float* __restrict__ ws, int m, int n, int k, int k_chunk) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, TM = Cfg::TM, TN = Cfg::TN;
  constexpr int LM = Cfg::LM, LN = Cfg::LN, NT = Cfg::kThreads;
  constexpr int kLdsA = Cfg::kLdsA, kLdsB = Cfg::kLdsB;
  using LoadA = TileLoader<BM, BK, NT, !TransA, Vec>;  // a is k-contiguous unless transposed
  using LoadB = TileLoader<BN, BK, NT, TransB, Vec>;   // b is k-contiguous when transposed
  static_assert(LoadA::kLds == kLdsA && LoadB::kLds == kLdsB, "layouts agree");
  // The scalar fallback (unaligned or odd sizes) takes the single-buffer flow even in a two-stage
  // config: holding its per-element prefetch registers across the compute would spill.
  constexpr bool kDouble = Cfg::kStages == 2 && Vec;
  // sm_80+: every load is a cp.async (k-contiguous operands through the staging slots);
  // before sm_80 the two-stage flow prefetches into registers instead.
  constexpr bool kAsync = kDouble && kHasCpAsync;
  constexpr bool kStageA = kAsync && !TransA, kStageB = kAsync && TransB;  // k-contiguous: staged

  float* const as = dynamic_smem();                             // [stage][BK][kLdsA]
  float* const bs = as + Cfg::kStages * BK * kLdsA;             // [stage][BK][kLdsB]
  float* const stage_a = bs + Cfg::kStages * BK * kLdsB;        // staging for a (kernel 4, k-contiguous)
  float* const stage_b = stage_a + (kStageA ? BM * BK : 0);     // staging for b

  // grouped block order (see header)
  const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
  const int pid = blockIdx.x, per_group = kGroupM * tiles_n;
  const int first_m = (pid / per_group) * kGroupM;
  const int group_rows = min(tiles_m - first_m, kGroupM);
  const int row0 = (first_m + (pid % per_group) % group_rows) * BM;
  const int col0 = ((pid % per_group) / group_rows) * BN;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_m = warp / (BN / Cfg::WN), warp_n = warp % (BN / Cfg::WN);
  const int lm = lane / LN, ln = lane % LN;
  const int lda = TransA ? m : k, ldb = TransB ? k : n;
  const int kbeg = blockIdx.y * k_chunk, kend = min(k, kbeg + k_chunk);
  const int ntiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
  // tile origins op(a)[row0][kbeg] and op(b)^T[col0][kbeg], advanced by one k step per tile
  const float* a_tile = TransA ? a + static_cast<int64_t>(kbeg) * lda + row0 : a + static_cast<int64_t>(row0) * lda + kbeg;
  const float* b_tile = TransB ? b + static_cast<int64_t>(col0) * ldb + kbeg : b + static_cast<int64_t>(kbeg) * ldb + col0;
  const int a_step = TransA ? BK * lda : BK;  // 32-bit: the launcher keeps tile * ld < 2^31
  const int b_step = TransB ? BK : BK * ldb;
  const int m_left = m - row0, n_left = n - col0;

  LoadA la;
  LoadB lb;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  // fragment bases: this lane's first float4 of op(a) and op(b) in a stage
  const int a_off = warp_m * Cfg::WM + lm * 4, b_off = warp_n * Cfg::WN + ln * 4;

  // FMAs of k steps [P0, P1) of the tile in `stage` (P0, P1: std::integral_constant)
  auto compute = [&](int stage, auto P0, auto P1) {
    const float* sa = as + stage * BK * kLdsA + a_off;
    const float* sb = bs + stage * BK * kLdsB + b_off;
#pragma unroll
    for (int p = decltype(P0)::value; p < decltype(P1)::value; ++p) {
      float ra[TM], rb[TN];
#pragma unroll
      for (int s = 0; s < TM / 4; ++s) {
        const float4 v = *reinterpret_cast<const float4*>(sa + p * kLdsA + s * LM * 4);
        ra[4 * s] = v.x, ra[4 * s + 1] = v.y, ra[4 * s + 2] = v.z, ra[4 * s + 3] = v.w;
      }
#pragma unroll
      for (int t = 0; t < TN / 4; ++t) {
        const float4 v = *reinterpret_cast<const float4*>(sb + p * kLdsB + t * LN * 4);
        rb[4 * t] = v.x, rb[4 * t + 1] = v.y, rb[4 * t + 2] = v.z, rb[4 * t + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
  };

  if constexpr (!kDouble) {
    // ---- kernel 3: single buffer
    int k_left = kend - kbeg;  // of the current tile
    for (int t = 0; t < ntiles; ++t, a_tile += a_step, b_tile += b_step, k_left -= BK) {
      la.load(a_tile, lda, m_left, k_left, tid);
      la.store(as, tid);
      lb.load(b_tile, ldb, n_left, k_left, tid);
      lb.store(bs, tid);
      __syncthreads();
      compute(0, std::integral_constant<int, 0>{}, std::integral_constant<int, BK>{});
      __syncthreads();
    }
  } else if (kAsync) {
    // ---- kernels 4, 5, 7 (sm_80+): two stages, every tile arrives by cp.async.
    // issue(): tile at (a_tile, b_tile) -> stage st (mn-contiguous operands) or staging (k-contiguous)
    // land(): wait for this thread's copies, then move its staged chunks into stage st
    auto issue = [&](int st, int k_left) {
      if constexpr (kStageA) LoadA::copy_async_staged(stage_a, a_tile, lda, m_left, k_left, tid);
      else LoadA::copy_async(as + st * BK * kLdsA, a_tile, lda, m_left, k_left, tid);
      if constexpr (kStageB) LoadB::copy_async_staged(stage_b, b_tile, ldb, n_left, k_left, tid);
      else LoadB::copy_async(bs + st * BK * kLdsB, b_tile, ldb, n_left, k_left, tid);
      cp_async_commit();
    };
    auto land = [&](int st) {
      cp_async_wait_all();
      if constexpr (kStageA) LoadA::unstage(as + st * BK * kLdsA, stage_a, tid);
      if constexpr (kStageB) LoadB::unstage(bs + st * BK * kLdsB, stage_b, tid);
    };
    int k_left = kend - kbeg;  // of the tile issued last
    if (ntiles > 0) {
      issue(0, k_left);
      land(0);
      __syncthreads();
    }
    for (int t = 0; t < ntiles; ++t) {
      const int cur = t & 1, nxt = cur ^ 1;
      const bool has_next = t + 1 < ntiles;
      // Stage nxt (and the staging slots) were last read during iteration t-1, which every thread
      // finished before the barrier that ended it: free to overwrite.
      if (has_next) {
        a_tile += a_step, b_tile += b_step, k_left -= BK;
        issue(nxt, k_left);
      }
      compute(cur, std::integral_constant<int, 0>{}, std::integral_constant<int, BK>{});
      if (has_next) land(nxt);
      __syncthreads();  // stage nxt complete for everyone; stage cur free for the next copy
    }
  } else if (ntiles > 0) {
    // ---- kernels 4, 5, 7 before sm_80: two stages, tile t+1 prefetched into registers during the
    // compute of tile t and stored after it.
    int k_left = kend - kbeg;  // of the tile loaded last
    la.load(a_tile, lda, m_left, k_left, tid);
    lb.load(b_tile, ldb, n_left, k_left, tid);
    la.store(as, tid);
    lb.store(bs, tid);
    __syncthreads();
    for (int t = 0; t < ntiles; ++t) {
      const int cur = t & 1, nxt = cur ^ 1;
      const bool has_next = t + 1 < ntiles;
      if (has_next) {
        a_tile += a_step, b_tile += b_step, k_left -= BK;
        la.load(a_tile, lda, m_left, k_left, tid);
        lb.load(b_tile, ldb, n_left, k_left, tid);
      }
      compute(cur, std::integral_constant<int, 0>{}, std::integral_constant<int, BK>{});
      if (has_next) {
        la.store(as + nxt * BK * kLdsA, tid);
        lb.store(bs + nxt * BK * kLdsB, tid);
      }
      __syncthreads();
    }
  }

  // epilogue: c, or this split's slice of the workspace
  float* const out = gridDim.y == 1 ? c : ws + static_cast<int64_t>(blockIdx.y) * m * n;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = row0 + warp_m * Cfg::WM + (i / 4) * LM * 4 + lm * 4 + (i % 4);
#pragma unroll
    for (int t = 0; t < TN / 4; ++t)
      store4<Vec>(out, n, row, col0 + b_off + t * LN * 4, m, n, &acc[i][4 * t]);
  }
}

// c[i] = sum over s of ws[s][i], s in order 0..splits-1 (deterministic); ws is (splits, mn).
template <bool Vec>
__global__ void splitk_reduce_kernel(const float* __restrict__ ws, float* __restrict__ c, int64_t mn, int splits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (Vec) {
    const int64_t n4 = mn / 4;
    const float4* w4 = reinterpret_cast<const float4*>(ws);
    float4* c4 = reinterpret_cast<float4*>(c);
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4; i += stride) {
      float4 s = w4[i];
      for (int z = 1; z < splits; ++z) {
        const float4 v = w4[z * n4 + i];
        s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
      }
      c4[i] = s;
    }
  } else {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < mn; i += stride) {
      float s = ws[i];
      for (int z = 1; z < splits; ++z) s += ws[z * mn + i];
      c[i] = s;
    }
  }
}

// Splits of k that launch_warptile will really use for a request of `splits` (each split a whole
// number of BK steps, none empty).
template <class Cfg>
inline int effective_splits(int k, int splits, int* k_chunk) {
  splits = std::max(1, std::min(splits, static_cast<int>(ceil_div(std::max(k, 1), Cfg::BK))));
  const int chunk = static_cast<int>(ceil_div(ceil_div(k, splits), Cfg::BK) * Cfg::BK);
  if (k_chunk) *k_chunk = chunk;
  return chunk > 0 ? static_cast<int>(ceil_div(k, chunk)) : 1;
}

// Workspace floats needed by launch_warptile<Cfg> with this split request (0 when not split).
template <class Cfg>
inline int64_t workspace_floats(int m, int n, int k, int splits) {
  const int s = effective_splits<Cfg>(k, splits, nullptr);
  return s > 1 ? static_cast<int64_t>(s) * m * n : 0;
}

template <class Cfg, bool TA, bool TB, bool V>
void launch_one(dim3 grid, const float* a, const float* b, float* c, float* ws, int m, int n, int k, int k_chunk,
                cudaStream_t s) {
  auto kernel = sgemm_warptile_kernel<Cfg, TA, TB, V>;
  // staging for k-contiguous operands only in the two-stage Vec flow (see the kernel)
  constexpr size_t smem = Cfg::smem_bytes(V && !TA, V && TB);
  // Above 48 KB of dynamic shared memory a kernel must opt in (once per kernel and device; this
  // program uses one device).
  static const bool opted_in = [&] {
    if (smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)opted_in;
  SGEMM_LAUNCH(kernel, grid, Cfg::kThreads, smem, s)(a, b, c, ws, m, n, k, k_chunk);
  LAUNCH_CHECK();
}

// c = op(a) @ op(b) with tile config Cfg and `splits` requested k splits (ws: workspace_floats<Cfg>
// floats, may be null when that is 0). Returns the number of splits used.
template <class Cfg>
int launch_warptile(const float* a, bool ta, const float* b, bool tb, float* c, int m, int n, int k, int splits,
                    float* ws, int64_t ws_floats, cudaStream_t s) {
  if (m == 0 || n == 0) return 1;
  require_32bit_tile_offsets(std::max(Cfg::BM, Cfg::BN), ta, tb, m, n, k, "launch_warptile");
  int k_chunk = 0;
  splits = effective_splits<Cfg>(k, splits, &k_chunk);
  if (splits > 1 && (ws == nullptr || ws_floats < static_cast<int64_t>(splits) * m * n)) {
    std::fprintf(stderr, "launch_warptile: split-K workspace too small\n");
    std::exit(2);
  }
  if (k == 0) k_chunk = 0;
  const int64_t tiles = ceil_div(m, Cfg::BM) * ceil_div(n, Cfg::BN);
  dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  const bool vec = can_vectorize(a, ta, b, tb, c, m, n, k);
#define WT_LAUNCH(TA, TB, V) launch_one<Cfg, TA, TB, V>(grid, a, b, c, ws, m, n, k, k_chunk, s)
  if (vec) {
    if (!ta && !tb) WT_LAUNCH(false, false, true);
    else if (!ta && tb) WT_LAUNCH(false, true, true);
    else if (ta && !tb) WT_LAUNCH(true, false, true);
    else WT_LAUNCH(true, true, true);
  } else {
    if (!ta && !tb) WT_LAUNCH(false, false, false);
    else if (!ta && tb) WT_LAUNCH(false, true, false);
    else if (ta && !tb) WT_LAUNCH(true, false, false);
    else WT_LAUNCH(true, true, false);
  }
#undef WT_LAUNCH
  if (splits > 1) {
    const int64_t mn = static_cast<int64_t>(m) * n;
    const bool vec_reduce = mn % 4 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
    const int threads = 256;
    const int64_t work = vec_reduce ? mn / 4 : mn;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(work, threads), 65535));
    auto reduce = vec_reduce ? splitk_reduce_kernel<true> : splitk_reduce_kernel<false>;
    SGEMM_LAUNCH(reduce, blocks, threads, 0, s)(ws, c, mn, splits);
    LAUNCH_CHECK();
  }
  return splits;
}

// ============================================================================ kernel 6: dispatcher
// Picks a tile and a k split per shape. Heuristic (to be re-tuned from measured runs; see NOTES.md):
// - enough 128x128 tiles to give every SM one (tiles128 >= sms): kernel 4's tile, no split.
//   (kernel 7's 128x256 tile is kept out until a measurement shows it wins.)
// - otherwise the 64x64 tile of kernel 5, with k split so that about 2 blocks per SM are in
//   flight, each split keeping at least kMinKPerSplit of k (shorter pipelines stop paying).
struct Plan {
  int kernel;  // 4 or 5
  int splits;
};

constexpr int kMinKPerSplit = 128;

inline Plan plan(int m, int n, int k, int sms) {
  const int64_t tiles128 = ceil_div(m, 128) * ceil_div(n, 128);
  if (tiles128 >= sms) return {4, 1};
  const int64_t tiles64 = ceil_div(m, 64) * ceil_div(n, 64);
  int splits = 1;
  if (tiles64 < 2 * sms) {
    const int64_t want = (2 * sms) / std::max<int64_t>(tiles64, 1);
    const int64_t most = std::max(1, k / kMinKPerSplit);
    splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, most, 16})));
  }
  return {5, splits};
}

inline int64_t plan_workspace_floats(int m, int n, int k, int sms) {
  const Plan p = plan(m, n, k, sms);
  return p.kernel == 5 ? workspace_floats<Cfg5>(m, n, k, p.splits) : 0;
}

// What libgpumat's matmul() becomes: returns a short description of the choice.
inline std::string dispatch(const float* a, bool ta, const float* b, bool tb, float* c, int m, int n, int k,
                            float* ws, int64_t ws_floats, int sms, cudaStream_t s) {
  const Plan p = plan(m, n, k, sms);
  if (p.kernel == 4) {
    launch_warptile<Cfg4>(a, ta, b, tb, c, m, n, k, 1, ws, ws_floats, s);
    return "128x128";
  }
  const int used = launch_warptile<Cfg5>(a, ta, b, tb, c, m, n, k, p.splits, ws, ws_floats, s);
  return "64x64 split " + std::to_string(used);
}

}  // namespace tuned
// ============================================================================ end of the library part

// ============================================================================ harness: data, references
namespace {

// Uniform values in [-1, 1) from a counter hash (splitmix64): fresh, reproducible, never all zero.
__global__ void fill_uniform_kernel(float* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = static_cast<float>(static_cast<double>(z >> 40) * (2.0 / 16777216.0) - 1.0);
  }
}

void fill_uniform(float* p, int64_t n, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 4096));
  SGEMM_LAUNCH(fill_uniform_kernel, blocks, 256, 0, s)(p, n, seed);
  LAUNCH_CHECK();
}

// Keeps the GPU busy for `ns` nanoseconds, so that the host can queue every timed launch behind it:
// the events then time the GPU's work, not the host's launch overhead (which differs between
// cuBLAS, a split-K pair of launches and one kernel).
#ifndef GPUMAT_EMULATED
__global__ void spin_kernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
#endif

const char* case_name(bool ta, bool tb) { return !ta ? (!tb ? "NN" : "NT") : (!tb ? "TN" : "TT"); }

// float64 reference of op(a) @ op(b) for the listed outputs (all when idx is empty).
void cpu_reference(const std::vector<float>& a, bool ta, const std::vector<float>& b, bool tb, int m, int n,
                   int k, const std::vector<int64_t>& idx, std::vector<double>& out) {
  // op(a) as (m, k) and op(b)^T as (n, k), contiguous along k, in double
  std::vector<double> A(static_cast<size_t>(m) * k), Bt(static_cast<size_t>(n) * k);
  // loops run along the contiguous axis of the source
  if (ta) {
    for (int p = 0; p < k; ++p)
      for (int i = 0; i < m; ++i) A[static_cast<size_t>(i) * k + p] = a[static_cast<size_t>(p) * m + i];
  } else {
    for (size_t e = 0; e < A.size(); ++e) A[e] = a[e];
  }
  if (tb) {
    for (size_t e = 0; e < Bt.size(); ++e) Bt[e] = b[e];
  } else {
    for (int p = 0; p < k; ++p)
      for (int j = 0; j < n; ++j) Bt[static_cast<size_t>(j) * k + p] = b[static_cast<size_t>(p) * n + j];
  }
  auto dot = [&](int64_t e) {
    const int i = static_cast<int>(e / n), j = static_cast<int>(e % n);
    const double* x = &A[static_cast<size_t>(i) * k];
    const double* y = &Bt[static_cast<size_t>(j) * k];
    double s = 0.0;
    for (int p = 0; p < k; ++p) s += x[p] * y[p];
    return s;
  };
  if (idx.empty()) {
    const int64_t total = static_cast<int64_t>(m) * n;
    out.assign(static_cast<size_t>(total), 0.0);
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < total; ++e) out[static_cast<size_t>(e)] = dot(e);
  } else {
    out.assign(idx.size(), 0.0);
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < static_cast<int64_t>(idx.size()); ++q) out[static_cast<size_t>(q)] = dot(idx[q]);
  }
}

struct ErrStats {
  double rel = 0.0;  // ||out - ref|| / ||ref|| (NaN if out has any non-finite value)
  int64_t nonfinite = 0;
};

ErrStats rel_error(const std::vector<float>& out, const std::vector<float>& ref) {
  ErrStats e;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      ++e.nonfinite;
      continue;
    }
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  e.rel = e.nonfinite ? NAN : (den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  return e;
}

ErrStats rel_error64(const std::vector<float>& out, const std::vector<int64_t>& idx, const std::vector<double>& ref) {
  ErrStats e;
  double num = 0.0, den = 0.0;
  for (size_t q = 0; q < ref.size(); ++q) {
    const float v = out[static_cast<size_t>(idx.empty() ? q : idx[q])];
    if (!std::isfinite(v)) continue;  // counted below
    const double d = v - ref[q];
    num += d * d;
    den += ref[q] * ref[q];
  }
  // every output must be finite, not only the sampled ones
  for (float v : out)
    if (!std::isfinite(v)) ++e.nonfinite;
  e.rel = e.nonfinite ? NAN : (den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  return e;
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ============================================================================ harness: problem list, options

struct Problem {
  int m, n, k;
  bool ta, tb;
  std::string tag;
};

struct KernelSpec {
  int id;      // 0..7, or -1 cuBLAS (default math), -2 cuBLAS (pedantic math), -3 cuBLAS default again
  int splits;  // kernel 5: 0 = heuristic; else forced
  std::string name() const {
    if (id == -1) return "cublas";
    if (id == -2) return "cublas-pedantic";
    if (id == -3) return "cublas#2";
    if (id == 5 && splits > 0) return "5:s" + std::to_string(splits);
    return std::to_string(id);
  }
};

struct Options {
  std::vector<Problem> problems;
  std::vector<KernelSpec> kernels;
  std::vector<std::string> trans_filter;  // empty = all
  int reps = 30, warmup = 5;
  bool check_only = false, misalign = false;
  double tol = 1e-5;
  double cpu_full_limit = 3e8;  // m*n*k up to which the float64 reference covers every output
  int samples = 2048;           // outputs checked in float64 above that
  std::string json;
  uint64_t seed = 1234;
};

// MNIST MLP 784 -> 256 -> 100 -> 10 at batch 1000 (gpumat.models.mlp): forward x@W, dW = h^T @ dy
// (trans_a), dh = dy @ W^T (trans_b) per layer. The first three are the ladder's named targets.
void add_mnist(std::vector<Problem>& v) {
  v.push_back({1000, 256, 784, false, false, "mnist L1 fwd"});
  v.push_back({784, 256, 1000, true, false, "mnist L1 dW"});
  v.push_back({1000, 784, 256, false, true, "mnist L1 dX"});
  v.push_back({1000, 100, 256, false, false, "mnist L2 fwd"});
  v.push_back({256, 100, 1000, true, false, "mnist L2 dW"});
  v.push_back({1000, 256, 100, false, true, "mnist L2 dX"});
  v.push_back({1000, 10, 100, false, false, "mnist L3 fwd"});
  v.push_back({100, 10, 1000, true, false, "mnist L3 dW"});
  v.push_back({1000, 100, 10, false, true, "mnist L3 dX"});
}

void add_all_cases(std::vector<Problem>& v, int m, int n, int k, const std::string& tag) {
  for (int t = 0; t < 4; ++t) v.push_back({m, n, k, (t & 2) != 0, (t & 1) != 0, tag});
}

// Awkward sizes: 1x1, odd k, tails in every dimension, exact multiples, non-multiples of 4.
void add_edge(std::vector<Problem>& v) {
  const int s[][3] = {{1, 1, 1},     {1, 1, 7},      {3, 5, 7},       {17, 33, 9},    {64, 64, 64},
                      {65, 63, 17},  {127, 129, 33}, {128, 128, 16},  {128, 256, 48}, {130, 258, 100},
                      {257, 255, 513}, {1000, 10, 100}, {1000, 100, 10}, {33, 1000, 2}, {4, 4, 4000},
                      {200, 300, 1}, {96, 160, 4096}};
  for (auto& d : s) add_all_cases(v, d[0], d[1], d[2], "edge");
}

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "error: %s\n"
               "usage: sgemm_ladder [--shapes mnist|4096|edge|all|M,N,K]... [--kernels 0,1,2,5:4,...]\n"
               "                    [--trans nn,nt,tn,tt] [--splits 1,2,4,8] [--reps N] [--warmup N]\n"
               "                    [--check-only] [--misalign] [--tol X] [--json FILE] [--seed S]\n",
               msg);
  std::exit(64);
}

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    const std::string item = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!item.empty()) out.push_back(item);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  std::vector<int> sweep;
  bool kernels_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + arg).c_str());
      return argv[++i];
    };
    if (arg == "--shapes") {
      for (const std::string& s : split_list(value(), ';')) {
        if (s == "mnist") add_mnist(o.problems);
        else if (s == "4096") add_all_cases(o.problems, 4096, 4096, 4096, "4096^3");
        else if (s == "edge") add_edge(o.problems);
        else if (s == "all") {
          add_mnist(o.problems);
          add_all_cases(o.problems, 4096, 4096, 4096, "4096^3");
        } else {
          const auto d = split_list(s, ',');
          if (d.size() != 3) usage(("bad shape " + s).c_str());
          const long m = std::atol(d[0].c_str()), n = std::atol(d[1].c_str()), k = std::atol(d[2].c_str());
          if (m < 1 || n < 1 || k < 0 || m > (1L << 30) || n > (1L << 30) || k > (1L << 30))
            usage(("bad shape " + s).c_str());
          add_all_cases(o.problems, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), s);
        }
      }
    } else if (arg == "--kernels") {
      kernels_given = true;
      for (const std::string& s : split_list(value(), ',')) {
        const auto parts = split_list(s, ':');
        const int id = std::atoi(parts[0].c_str());
        if (parts[0].find_first_not_of("0123456789") != std::string::npos || id < 0 || id > 7)
          usage(("bad kernel " + s).c_str());
        const int sp = parts.size() > 1 ? std::atoi(parts[1].c_str()) : 0;
        if (parts.size() > 1 && (id != 5 || sp < 1)) usage(("only kernel 5 takes a split: " + s).c_str());
        o.kernels.push_back({id, sp});
      }
    } else if (arg == "--trans") {
      for (std::string t : split_list(value(), ',')) {
        for (auto& ch : t) ch = static_cast<char>(std::toupper(ch));
        if (t != "NN" && t != "NT" && t != "TN" && t != "TT") usage(("bad case " + t).c_str());
        o.trans_filter.push_back(t);
      }
    } else if (arg == "--splits") {
      for (const std::string& s : split_list(value(), ',')) sweep.push_back(std::max(1, std::atoi(s.c_str())));
    } else if (arg == "--reps") o.reps = std::max(20, std::atoi(value().c_str()));
    else if (arg == "--warmup") o.warmup = std::max(1, std::atoi(value().c_str()));
    else if (arg == "--check-only") o.check_only = true;
    else if (arg == "--misalign") o.misalign = true;
    else if (arg == "--tol") o.tol = std::atof(value().c_str());
    else if (arg == "--json") o.json = value();
    else if (arg == "--seed") o.seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (arg == "--help" || arg == "-h") usage("help");
    else usage(("unknown argument " + arg).c_str());
  }
  if (o.problems.empty()) add_mnist(o.problems);
  if (!kernels_given)
    for (int id = 0; id <= 7; ++id) o.kernels.push_back({id, 0});
  for (int s : sweep) o.kernels.push_back({5, s});
  if (!o.trans_filter.empty()) {
    std::vector<Problem> kept;
    for (const auto& p : o.problems)
      if (std::find(o.trans_filter.begin(), o.trans_filter.end(), case_name(p.ta, p.tb)) != o.trans_filter.end())
        kept.push_back(p);
    o.problems = kept;
  }
  return o;
}

// ============================================================================ harness: running

struct Context {
  cudaStream_t stream;
#ifndef GPUMAT_EMULATED
  cublasHandle_t blas_default, blas_pedantic;
#endif
  int sms;
  float* ws = nullptr;
  int64_t ws_floats = 0;
  void ensure_ws(int64_t floats) {
    if (floats <= ws_floats) return;
    if (ws) CUDA_CHECK(cudaFree(ws));
    CUDA_CHECK(cudaMalloc(&ws, static_cast<size_t>(floats) * sizeof(float)));
    ws_floats = floats;
  }
};

#ifndef GPUMAT_EMULATED
void cublas_sgemm(cublasHandle_t h, const float* a, bool ta, const float* b, bool tb, float* c, int m, int n,
                  int k) {
  // Row-major c (m, n) = op(a) op(b) is column-major c^T (n, m) = op(b)^T op(a)^T: swap the operands.
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b,
                           tb ? std::max(k, 1) : n, a, ta ? m : std::max(k, 1), &zero, c, n));
}
#endif

// Runs kernel `ks` once; returns a note (the dispatcher's choice, the split used).
std::string run_kernel(Context& ctx, const KernelSpec& ks, const float* a, bool ta, const float* b, bool tb,
                       float* c, int m, int n, int k) {
  using namespace tuned;
  switch (ks.id) {
#ifndef GPUMAT_EMULATED
    case -1: cublas_sgemm(ctx.blas_default, a, ta, b, tb, c, m, n, k); return "";
    case -2: cublas_sgemm(ctx.blas_pedantic, a, ta, b, tb, c, m, n, k); return "";
    case -3: cublas_sgemm(ctx.blas_default, a, ta, b, tb, c, m, n, k); return "same as cublas, timed last";
#endif
    case 0: naive::launch(a, ta, b, tb, c, m, n, k, ctx.stream); return "";
    case 1: baseline::launch(a, ta, b, tb, c, m, n, k, ctx.stream); return "";
    case 2: k2::launch(a, ta, b, tb, c, m, n, k, ctx.stream); return "";
    case 3: launch_warptile<Cfg3>(a, ta, b, tb, c, m, n, k, 1, nullptr, 0, ctx.stream); return "";
    case 4: launch_warptile<Cfg4>(a, ta, b, tb, c, m, n, k, 1, nullptr, 0, ctx.stream); return "";
    case 5: {
      const int want = ks.splits > 0 ? ks.splits : plan(m, n, k, ctx.sms).splits;
      const int used = launch_warptile<Cfg5>(a, ta, b, tb, c, m, n, k, want, ctx.ws, ctx.ws_floats, ctx.stream);
      return "split " + std::to_string(used);
    }
    case 6: return dispatch(a, ta, b, tb, c, m, n, k, ctx.ws, ctx.ws_floats, ctx.sms, ctx.stream);
    case 7: launch_warptile<Cfg7>(a, ta, b, tb, c, m, n, k, 1, nullptr, 0, ctx.stream); return "";
  }
  return "";
}

int64_t ws_needed(const Context& ctx, const KernelSpec& ks, int m, int n, int k) {
  if (ks.id == 5)
    return tuned::workspace_floats<tuned::Cfg5>(m, n, k, ks.splits > 0 ? ks.splits : tuned::plan(m, n, k, ctx.sms).splits);
  if (ks.id == 6) return tuned::plan_workspace_floats(m, n, k, ctx.sms);
  return 0;
}

struct Result {
  std::string shape_tag, kcase, kernel, note;
  int m, n, k;
  bool misaligned;
  double err_ref = NAN, err_fp64 = NAN;  // vs cuBLAS pedantic; vs float64 (all or sampled outputs)
  bool fp64_full = false;
  bool pass = false;
  double ms = NAN, ms_min = NAN, ms_max = NAN, gflops = NAN, pct_cublas = NAN, x_naive = NAN;
};

struct Buffers {
  std::vector<float*> a, b, c;  // rotation sets
  ~Buffers() {
    for (auto* v : {&a, &b, &c})
      for (float* p : *v) CUDA_CHECK(cudaFree(p));
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);

  int dev = 0;
  CUDA_CHECK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  int driver = 0, runtime = 0, clock_khz = 0, mem_clock_khz = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, dev));

  Context ctx;
  ctx.sms = prop.multiProcessorCount;
  CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
  int cublas_version = 0;
#ifdef GPUMAT_EMULATED
  // The emulator checks correctness only: there is no cuBLAS, the reference is float64 on the host,
  // and a time measured here says nothing about a GPU.
  opt.check_only = true;
  std::printf("EMULATED DEVICE (gpumat's CUDA emulator on the CPU): correctness only, no timings; "
              "reference: float64\n");
#else
  CUBLAS_CHECK(cublasCreate(&ctx.blas_default));
  CUBLAS_CHECK(cublasCreate(&ctx.blas_pedantic));
  CUBLAS_CHECK(cublasSetStream(ctx.blas_default, ctx.stream));
  CUBLAS_CHECK(cublasSetStream(ctx.blas_pedantic, ctx.stream));
  // FP32 everywhere: default math never uses TF32 for cublasSgemm unless NVIDIA_TF32_OVERRIDE=1 or
  // CUBLAS_TF32_TENSOR_OP_MATH is set; pedantic math (the reference) also forbids reduced-precision
  // reductions.
  CUBLAS_CHECK(cublasSetMathMode(ctx.blas_default, CUBLAS_DEFAULT_MATH));
  CUBLAS_CHECK(cublasSetMathMode(ctx.blas_pedantic, CUBLAS_PEDANTIC_MATH));
  CUBLAS_CHECK(cublasGetVersion(ctx.blas_default, &cublas_version));
#endif
  const char* tf32_env = std::getenv("NVIDIA_TF32_OVERRIDE");

  std::printf("device: %s, %d SMs, SM clock %.0f MHz, mem clock %.0f MHz, L2 %.0f MB, cc %d.%d\n", prop.name,
              prop.multiProcessorCount, clock_khz / 1e3, mem_clock_khz / 1e3, prop.l2CacheSize / 1048576.0,
              prop.major, prop.minor);
  std::printf("driver %d, runtime %d, cuBLAS %d, NVIDIA_TF32_OVERRIDE=%s, OpenMP threads %d\n", driver, runtime,
              cublas_version, tf32_env ? tf32_env : "(unset)",
#ifdef _OPENMP
              omp_get_max_threads()
#else
              1
#endif
  );
  std::printf("mode: %s, reps %d (median), warm-up %d, tol %.1e\n\n",
              opt.check_only ? "correctness only" : "correctness + timing", opt.reps, opt.warmup, opt.tol);

  std::vector<Result> results;
  int failures = 0;
  uint64_t seed = opt.seed;

  std::vector<int> offsets = {0};
  if (opt.misalign) offsets.push_back(1);

  for (const Problem& pr : opt.problems) {
    for (int offset : offsets) {
      const int m = pr.m, n = pr.n, k = pr.k;
      const bool ta = pr.ta, tb = pr.tb;
      const int64_t na = static_cast<int64_t>(m) * k, nb = static_cast<int64_t>(k) * n,
                    nc = static_cast<int64_t>(m) * n;
      const double set_bytes = 4.0 * (na + nb + nc);
      // Rotate input sets so that small problems are not timed out of L2: about 3x L2 in all.
      int nsets = 1;
      if (!opt.check_only)
        nsets = static_cast<int>(std::min<double>(32.0, std::max(1.0, std::ceil(3.0 * prop.l2CacheSize / set_bytes))));
      Buffers buf;
      for (int s = 0; s < nsets; ++s) {
        float *pa, *pb, *pc;
        CUDA_CHECK(cudaMalloc(&pa, (na + 4) * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&pb, (nb + 4) * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&pc, (nc + 4) * sizeof(float)));
        buf.a.push_back(pa), buf.b.push_back(pb), buf.c.push_back(pc);
        fill_uniform(pa + offset, na, seed++ * 0x1000193ull, ctx.stream);
        fill_uniform(pb + offset, nb, seed++ * 0x1000193ull, ctx.stream);
      }
      auto A = [&](int s) { return buf.a[s] + offset; };
      auto B = [&](int s) { return buf.b[s] + offset; };
      auto C = [&](int s) { return buf.c[s] + offset; };

      int64_t ws = 0;
      for (const auto& ks : opt.kernels) ws = std::max(ws, ws_needed(ctx, ks, m, n, k));
      ctx.ensure_ws(ws);

      // ---- references: cuBLAS pedantic FP32 on the device, float64 on the CPU
      std::vector<float> ha(static_cast<size_t>(na)), hb(static_cast<size_t>(nb)), ref(static_cast<size_t>(nc)),
          out(static_cast<size_t>(nc));
      CUDA_CHECK(cudaMemsetAsync(C(0), 0xFF, nc * sizeof(float), ctx.stream));
#ifndef GPUMAT_EMULATED
      cublas_sgemm(ctx.blas_pedantic, A(0), ta, B(0), tb, C(0), m, n, k);
      CUDA_CHECK(cudaMemcpyAsync(ref.data(), C(0), nc * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
#endif
      CUDA_CHECK(cudaMemcpyAsync(ha.data(), A(0), na * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
      CUDA_CHECK(cudaMemcpyAsync(hb.data(), B(0), nb * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
      CUDA_CHECK(cudaStreamSynchronize(ctx.stream));

      std::vector<int64_t> idx;  // empty: every output
      const bool full64 = static_cast<double>(m) * n * k <= opt.cpu_full_limit;
      if (!full64) {
        uint64_t r = seed * 0x9E3779B97F4A7C15ull + 7;
        const int64_t corners[] = {0, n - 1, (m - 1) * static_cast<int64_t>(n), nc - 1};
        for (int64_t e : corners) idx.push_back(e);
        for (int q = 0; q < opt.samples; ++q) {
          r ^= r << 13, r ^= r >> 7, r ^= r << 17;
          idx.push_back(static_cast<int64_t>(r % static_cast<uint64_t>(nc)));
        }
      }
      std::vector<double> ref64;
      cpu_reference(ha, ta, hb, tb, m, n, k, idx, ref64);
#ifdef GPUMAT_EMULATED
      if (!full64) usage("the emulated run needs shapes small enough for a full float64 reference");
      for (int64_t e = 0; e < nc; ++e) ref[static_cast<size_t>(e)] = static_cast<float>(ref64[static_cast<size_t>(e)]);
#endif
      const ErrStats ref_vs64 = rel_error64(ref, idx, ref64);

      std::printf("== %s  m=%d n=%d k=%d  %s%s  (cuBLAS pedantic vs float64%s: %.2e; %d input set%s)\n",
                  pr.tag.c_str(), m, n, k, case_name(ta, tb), offset ? "  misaligned" : "",
                  full64 ? "" : " sampled", ref_vs64.rel, nsets, nsets > 1 ? "s" : "");
      if (!(ref_vs64.rel < opt.tol)) {
        std::printf("   !! the cuBLAS reference itself is off by %.2e against float64\n", ref_vs64.rel);
        ++failures;
      }

      // cuBLAS (default math) is timed first and again last: the two show the run-to-run spread.
#ifdef GPUMAT_EMULATED
      std::vector<KernelSpec> specs;
#else
      std::vector<KernelSpec> specs = {{-1, 0}};
#endif
      for (const auto& ks : opt.kernels) specs.push_back(ks);
      if (!opt.check_only) specs.push_back({-2, 0}), specs.push_back({-3, 0});

      std::vector<Result> rows;
      for (const auto& ks : specs) {
        Result res;
        res.shape_tag = pr.tag, res.kcase = case_name(ta, tb), res.kernel = ks.name();
        res.m = m, res.n = n, res.k = k, res.misaligned = offset != 0, res.fp64_full = full64;
        // ---- correctness: NaN-poisoned output, one run, every element checked
        CUDA_CHECK(cudaMemsetAsync(C(0), 0xFF, nc * sizeof(float), ctx.stream));
        res.note = run_kernel(ctx, ks, A(0), ta, B(0), tb, C(0), m, n, k);
        CUDA_CHECK(cudaMemcpyAsync(out.data(), C(0), nc * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        const ErrStats e_ref = rel_error(out, ref);
        const ErrStats e_64 = rel_error64(out, idx, ref64);
        res.err_ref = e_ref.rel, res.err_fp64 = e_64.rel;
        res.pass = e_ref.nonfinite == 0 && e_ref.rel < opt.tol && e_64.rel < opt.tol;
        if (!res.pass) {
          ++failures;
          std::printf("   FAIL kernel %s: rel err vs cuBLAS %.3e, vs float64 %.3e, %lld non-finite outputs\n",
                      res.kernel.c_str(), e_ref.rel, e_64.rel, static_cast<long long>(e_ref.nonfinite));
        }
        // ---- timing: warm-up, then reps runs queued behind a spin kernel, one event pair each
        if (!opt.check_only && res.pass) {
          for (int w = 0; w < opt.warmup; ++w) run_kernel(ctx, ks, A(w % nsets), ta, B(w % nsets), tb, C(w % nsets), m, n, k);
          CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
          // estimate one run to size the spin and the repetitions (>= 20 always)
          cudaEvent_t e0, e1;
          CUDA_CHECK(cudaEventCreate(&e0));
          CUDA_CHECK(cudaEventCreate(&e1));
          CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
          run_kernel(ctx, ks, A(0), ta, B(0), tb, C(0), m, n, k);
          CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
          CUDA_CHECK(cudaEventSynchronize(e1));
          float est = 0;
          CUDA_CHECK(cudaEventElapsedTime(&est, e0, e1));
          CUDA_CHECK(cudaEventDestroy(e0));
          CUDA_CHECK(cudaEventDestroy(e1));
          const int reps = est > 50.0f ? 20 : opt.reps;  // the naive kernel at 4096^3
          std::vector<cudaEvent_t> start(reps), stop(reps);
          for (int r = 0; r < reps; ++r) {
            CUDA_CHECK(cudaEventCreate(&start[r]));
            CUDA_CHECK(cudaEventCreate(&stop[r]));
          }
          // host launch cost is at most ~20 us per run; keep the GPU busy while everything is queued
#ifndef GPUMAT_EMULATED
          spin_kernel<<<1, 1, 0, ctx.stream>>>(static_cast<uint64_t>(2e6 + reps * 30e3));
          LAUNCH_CHECK();
#endif
          for (int r = 0; r < reps; ++r) {
            const int s = r % nsets;
            CUDA_CHECK(cudaEventRecord(start[r], ctx.stream));
            run_kernel(ctx, ks, A(s), ta, B(s), tb, C(s), m, n, k);
            CUDA_CHECK(cudaEventRecord(stop[r], ctx.stream));
          }
          CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
          std::vector<float> ms(reps);
          for (int r = 0; r < reps; ++r) {
            CUDA_CHECK(cudaEventElapsedTime(&ms[r], start[r], stop[r]));
            CUDA_CHECK(cudaEventDestroy(start[r]));
            CUDA_CHECK(cudaEventDestroy(stop[r]));
          }
          res.ms = median(ms);
          res.ms_min = *std::min_element(ms.begin(), ms.end());
          res.ms_max = *std::max_element(ms.begin(), ms.end());
          res.gflops = 2.0 * m * n * k / (res.ms * 1e6);
        }
        rows.push_back(res);
      }
      if (!opt.check_only) {
        double t_cublas = NAN, t_naive = NAN;
        for (const auto& r : rows) {
          if (r.kernel == "cublas") t_cublas = r.ms;
          if (r.kernel == "0") t_naive = r.ms;
        }
        for (auto& r : rows) {
          r.pct_cublas = 100.0 * t_cublas / r.ms;
          r.x_naive = t_naive / r.ms;
        }
      }
      std::printf("   %-16s %10s %10s %9s %8s %10s %10s %5s  %s\n", "kernel", "ms", "GFLOP/s", "%cuBLAS", "x naive",
                  "err cuBLAS", "err fp64", "ok", "note");
      for (const auto& r : rows)
        std::printf("   %-16s %10.4f %10.1f %8.1f%% %8.1f %10.2e %10.2e %5s  %s\n", r.kernel.c_str(), r.ms, r.gflops,
                    r.pct_cublas, r.x_naive, r.err_ref, r.err_fp64, r.pass ? "yes" : "NO", r.note.c_str());
      std::printf("\n");
      for (auto& r : rows) results.push_back(r);
    }
  }

  // ---- summary, printed last: per problem the best tuned kernel and the dispatcher against cuBLAS
  if (!opt.check_only) {
    std::printf("summary (aligned runs; goals: >= 10x naive, >= 90%% of cuBLAS at 4096^3, >= 80%% at MNIST shapes)\n");
    std::printf("%-14s %-18s %4s %10s %10s %8s %10s %8s %8s\n", "shape", "m,n,k", "case", "cuBLAS ms", "best", "best %",
                "dispatch", "disp %", "x naive");
    for (size_t i = 0; i < results.size();) {
      size_t j = i;
      while (j < results.size() && results[j].shape_tag == results[i].shape_tag && results[j].m == results[i].m &&
             results[j].n == results[i].n && results[j].k == results[i].k && results[j].kcase == results[i].kcase &&
             results[j].misaligned == results[i].misaligned)
        ++j;
      if (!results[i].misaligned) {
        const Result* best = nullptr;
        const Result* disp = nullptr;
        double t_cublas = NAN;
        for (size_t q = i; q < j; ++q) {
          const Result& r = results[q];
          if (r.kernel == "cublas") t_cublas = r.ms;
          if (r.kernel == "6") disp = &r;
          if (r.kernel.rfind("cublas", 0) != 0 && r.kernel != "0" && r.kernel != "1" &&
              std::isfinite(r.ms) && (!best || r.ms < best->ms))
            best = &r;
        }
        char mnk[64];
        std::snprintf(mnk, sizeof mnk, "%d,%d,%d", results[i].m, results[i].n, results[i].k);
        std::printf("%-14s %-18s %4s %10.4f %10s %7.1f%% %10s %7.1f%% %8.1f\n", results[i].shape_tag.c_str(), mnk,
                    results[i].kcase.c_str(), t_cublas, best ? best->kernel.c_str() : "-",
                    best ? best->pct_cublas : NAN, disp ? disp->note.c_str() : "-", disp ? disp->pct_cublas : NAN,
                    disp ? disp->x_naive : NAN);
      }
      i = j;
    }
  }
  std::printf("\n%zu kernel runs checked, %d failed\n", results.size(), failures);

  if (!opt.json.empty()) {
    FILE* f = std::fopen(opt.json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", opt.json.c_str());
      return 2;
    }
    auto num = [](double v) {
      char s[32];
      if (std::isfinite(v)) std::snprintf(s, sizeof s, "%.6g", v);
      else std::snprintf(s, sizeof s, "null");
      return std::string(s);
    };
    std::fprintf(f, "{\n  \"device\": {\"name\": \"%s\", \"sms\": %d, \"sm_clock_mhz\": %.0f, \"l2_bytes\": %d, "
                    "\"cc\": \"%d.%d\", \"driver\": %d, \"runtime\": %d, \"cublas\": %d, \"tf32_override\": \"%s\"},\n",
                 prop.name, prop.multiProcessorCount, clock_khz / 1e3, prop.l2CacheSize, prop.major, prop.minor, driver,
                 runtime, cublas_version, tf32_env ? tf32_env : "");
    std::fprintf(f, "  \"args\": \"");
    for (int i = 1; i < argc; ++i) std::fprintf(f, "%s%s", i > 1 ? " " : "", argv[i]);
    std::fprintf(f, "\",\n  \"reps\": %d, \"warmup\": %d, \"tol\": %g, \"failures\": %d,\n  \"results\": [\n", opt.reps,
                 opt.warmup, opt.tol, failures);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "    {\"shape\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"case\": \"%s\", \"misaligned\": %s, "
                   "\"kernel\": \"%s\", \"note\": \"%s\", \"pass\": %s, \"err_cublas\": %s, \"err_fp64\": %s, "
                   "\"fp64_full\": %s, \"ms\": %s, \"ms_min\": %s, \"ms_max\": %s, \"gflops\": %s, "
                   "\"pct_cublas\": %s, \"x_naive\": %s}%s\n",
                   r.shape_tag.c_str(), r.m, r.n, r.k, r.kcase.c_str(), r.misaligned ? "true" : "false",
                   r.kernel.c_str(), r.note.c_str(), r.pass ? "true" : "false", num(r.err_ref).c_str(),
                   num(r.err_fp64).c_str(), r.fp64_full ? "true" : "false", num(r.ms).c_str(), num(r.ms_min).c_str(),
                   num(r.ms_max).c_str(), num(r.gflops).c_str(), num(r.pct_cublas).c_str(), num(r.x_naive).c_str(),
                   i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
    std::printf("wrote %s\n", opt.json.c_str());
  }

  if (ctx.ws) CUDA_CHECK(cudaFree(ctx.ws));
#ifndef GPUMAT_EMULATED
  CUBLAS_CHECK(cublasDestroy(ctx.blas_default));
  CUBLAS_CHECK(cublasDestroy(ctx.blas_pedantic));
#endif
  CUDA_CHECK(cudaStreamDestroy(ctx.stream));
  return failures ? 1 : 0;
}
