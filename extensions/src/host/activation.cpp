// Host activation family (the reference for ../cuda/activation.cu). Pointwise, every array (n,),
// `out` may alias an input:
//   relu, relu_gradient (out = dy where x > 0, else 0; NaN passes through both),
//   tanh, sigmoid (through exp(-|x|), so it never overflows), tanh_gradient = dy * (1 - y^2),
//   sigmoid_gradient = dy * y * (1 - y) with y the forward output, and
//   dropout: out = u_i < p ? 0 : x * scale, u_i = uniform01(seed, i) (../random.h), scale = 1/(1-p).
//   gelu, gelu_tanh, silu, softplus (lo = beta, hi = threshold), leaky_relu, elu (s = negative
//   slope, alpha) and their gradients from the forward input x; hardtanh_gradient (0 where
//   x <= lo or x >= hi, else dy). The formulas are ../cuda/activation.cu's, in the same order of arithmetic,
//   but for GELU's Phi, tanh and the sigmoid (vec_math.h's normal_cdf, vtanh and vsigmoid in SIMD
//   blocks compiled also for AVX2 and AVX-512, where CUDA calls erfcf, tanhf and expf): float32
//   rounding apart.
// relu_bias_gradient: dz = dy * (y > 0) and dbias = the column sums of dz, (rows, cols) -> (cols,).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../random.h"
#include "kernels.h"
#include "parallel.h"
#include "vec_math.h"

namespace gpumat::host {

namespace {
// The transcendental pointwise kernels as SIMD blocks over [lo, hi) (vec_math.h's functions,
// compiled also for AVX2 and AVX-512, the same bits on each), run by parallel_blocks. `omp simd`:
// out may be an input (in place), safe lane by lane but beyond the compiler's overlap check.
GPUMAT_SIMD_CLONES void tanh_block(const float* in, float* out, int64_t lo, int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) out[i] = vtanh(in[i]);
}

GPUMAT_SIMD_CLONES void sigmoid_block(const float* in, float* out, int64_t lo, int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) out[i] = vsigmoid(in[i]);
}

GPUMAT_SIMD_CLONES void silu_block(const float* in, float* out, int64_t lo, int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float x = in[i];
    out[i] = x * vsigmoid(x);
  }
}

GPUMAT_SIMD_CLONES void silu_gradient_block(const float* y, const float* dy, float* out, int64_t lo,
                                            int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float x = y[i];
    const float s = vsigmoid(x);
    out[i] = dy[i] * s * (1.0f + x * (1.0f - s));
  }
}

// softplus's gradient: dy where beta x > threshold, else dy sigmoid(beta x)
GPUMAT_SIMD_CLONES void softplus_gradient_block(const float* x, const float* dy, float beta, float threshold,
                                                float* out, int64_t lo, int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float z = x[i] * beta;
    out[i] = z > threshold ? dy[i] : dy[i] * vsigmoid(z);
  }
}
}  // namespace

// NOTE: written as a comparison so that NaN passes through (max(NaN, 0) would hide it).
void relu(int, const float* in, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = in[i] < 0.0f ? 0.0f : in[i]; });
}

// NOTE: the subgradient at exactly 0 is taken as 0; a NaN input gives NaN.
void relu_gradient(int, const float* in, const float* grad, float* out, int64_t n) {
  // Both operands are loaded unconditionally so the loop vectorises into selects.
  parallel_for(n, n, [&](int64_t i) {
    const float x = in[i], g = grad[i];
    out[i] = x > 0.0f ? g : (x != x ? x : 0.0f);
  });
}

void tanh(int, const float* in, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { tanh_block(in, out, lo, hi); });
}

void sigmoid(int, const float* in, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { sigmoid_block(in, out, lo, hi); });
}

void tanh_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    const float v = y[i];
    out[i] = dy[i] * (1.0f - v * v);
  });
}

void sigmoid_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    const float v = y[i];
    out[i] = dy[i] * v * (1.0f - v);
  });
}

namespace {
// Elements [lo, hi) of dropout. splitmix64's 64-bit multiplies are SIMD instructions only in
// AVX-512 (vpmullq); GPUMAT_SIMD_CLONES compiles this loop for it too, picked at load time.
// `omp simd`: out may be in (in place), which is safe lane by lane but defeats the compiler's
// overlap check.
GPUMAT_SIMD_CLONES void dropout_block(const float* in, float* out, int64_t lo, int64_t hi, float p,
                                      float scale, uint64_t seed) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i)
    out[i] = rng::uniform01(seed, static_cast<uint64_t>(i)) < p ? 0.0f : in[i] * scale;
}
}  // namespace

void dropout(int, const float* in, float* out, int64_t n, float p, float scale, uint64_t seed) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { dropout_block(in, out, lo, hi, p, scale, seed); });
}

namespace {
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi)
constexpr float kGeluBeta = 0.79788456080286536f;    // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

// GELU and its gradient over [lo, hi), SIMD loops compiled also for AVX2 and AVX-512 (the same bits
// on each: explicit fused multiply-adds, vec_math.h). Phi is vec_math.h's normal_cdf, not the C
// library's erf per element (a call the compiler cannot vectorise, most of a GPT step's GELU time),
// so these agree with the CUDA kernels' erfcf to float32 rounding, not bit for bit.
GPUMAT_SIMD_CLONES void gelu_block(const float* in, float* out, int64_t lo, int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float x = in[i];
    out[i] = x * normal_cdf(x);
  }
}

GPUMAT_SIMD_CLONES void gelu_gradient_block(const float* y, const float* dy, float* out, int64_t lo,
                                            int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float x = y[i];
    const float pdf = kInvSqrt2Pi * vexp(-0.5f * x * x);
    out[i] = dy[i] * fmadd(x, pdf, normal_cdf(x));
  }
}
}  // namespace

void gelu(int, const float* in, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { gelu_block(in, out, lo, hi); });
}

void gelu_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { gelu_gradient_block(y, dy, out, lo, hi); });
}

namespace {
GPUMAT_SIMD_CLONES void gelu_tanh_block(const float* in, float* out, int64_t lo, int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float x = in[i];
    const float inner = kGeluBeta * (x + kGeluKappa * x * x * x);
    out[i] = 0.5f * x * (1.0f + vtanh(inner));
  }
}

GPUMAT_SIMD_CLONES void gelu_tanh_gradient_block(const float* y, const float* dy, float* out, int64_t lo,
                                                 int64_t hi) {
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float x = y[i];
    const float x_sq = x * x;
    const float t = vtanh(kGeluBeta * (x + kGeluKappa * x_sq * x));
    const float left = 0.5f * (1.0f + t);
    const float right = 0.5f * x * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq);
    out[i] = dy[i] * (left + right);
  }
}
}  // namespace

void gelu_tanh(int, const float* in, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { gelu_tanh_block(in, out, lo, hi); });
}

void gelu_tanh_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { gelu_tanh_gradient_block(y, dy, out, lo, hi); });
}

void silu(int, const float* in, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { silu_block(in, out, lo, hi); });
}

void silu_gradient(int, const float* y, const float* dy, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t lo, int64_t hi) { silu_gradient_block(y, dy, out, lo, hi); });
}

void softplus(int, const float* in, float lo, float hi, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    const float x = in[i];
    const float z = x * lo;
    out[i] = z > hi ? x : (std::fmax(z, 0.0f) + std::log1p(std::exp(-std::fabs(z)))) / lo;
  });
}

void softplus_gradient(int, const float* x, const float* dy, float lo, float hi, float* out, int64_t n) {
  parallel_blocks(n, [&](int64_t b0, int64_t b1) { softplus_gradient_block(x, dy, lo, hi, out, b0, b1); });
}

void leaky_relu(int, const float* in, float s, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    const float x = in[i];
    out[i] = x > 0.0f ? x : x * s;
  });
}

void leaky_relu_gradient(int, const float* x, const float* dy, float s, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = x[i] > 0.0f ? dy[i] : dy[i] * s; });
}

void elu(int, const float* in, float s, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) {
    const float x = in[i];
    out[i] = x > 0.0f ? x : s * std::expm1(x);
  });
}

void elu_gradient(int, const float* x, const float* dy, float s, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = x[i] > 0.0f ? dy[i] : dy[i] * (s * std::exp(x[i])); });
}

void hardtanh_gradient(int, const float* x, const float* dy, float lo, float hi, float* out, int64_t n) {
  parallel_for(n, n, [&](int64_t i) { out[i] = x[i] <= lo || x[i] >= hi ? 0.0f : dy[i]; });
}

// dz = dy * (y > 0), dbias = column sums of dz: the backward pass of relu(z + bias) (the ReLU
// gradient and the bias gradient of a dense layer in one pass). y is the forward output or
// the pre-activation (y > 0 is the same mask). dz may alias dy.
//
// The rows are cut into chunks fixed by (rows, cols) alone. Each task (a chunk of rows times a
// tile of columns) walks its rows in order, contiguous along each row so the loop vectorizes, and
// sums its columns in double into the chunk's own partial row; the partial rows are then added in
// chunk order. The result is the same on any number of threads: deterministic.
namespace {
constexpr int64_t kRbgChunkRows = 64;           // fewest rows per chunk
constexpr int64_t kRbgMaxChunks = 64;           // enough tasks for any host's cores
constexpr int64_t kRbgPartialBudget = 1 << 18;  // doubles of partial rows (2 MiB) at most
constexpr int64_t kRbgColTile = 512;            // columns per task: 2 KiB of each row
}  // namespace

void relu_bias_gradient(int, const float* y, const float* dy, float* dz, float* dbias, int64_t rows,
                        int64_t cols) {
  int64_t chunks = std::min({(rows + kRbgChunkRows - 1) / kRbgChunkRows, kRbgMaxChunks,
                             std::max<int64_t>(1, kRbgPartialBudget / cols)});
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int64_t tiles = (cols + kRbgColTile - 1) / kRbgColTile;
  // One chunk writes dbias directly; more need the partial rows (reused between calls, so a
  // training step allocates nothing).
  thread_local std::vector<double> scratch;
  if (chunks > 1 && static_cast<int64_t>(scratch.size()) < chunks * cols)
    scratch.resize(static_cast<size_t>(chunks * cols));
  double* const partial = scratch.data();
  // Pass 1, a task: column tile (task % tiles) of row chunk (task / tiles): dz, and the tile's
  // column sums into dbias (one chunk) or its partial row.
  auto rows_pass = [&](int64_t task) {
    const int64_t k = task / tiles, c0 = (task % tiles) * kRbgColTile;
    const int64_t r1 = std::min(rows, (k + 1) * chunk_rows), w = std::min(cols - c0, kRbgColTile);
    double acc[kRbgColTile];
    for (int64_t c = 0; c < w; ++c) acc[c] = 0.0;
    for (int64_t r = k * chunk_rows; r < r1; ++r) {
      const float* yr = y + r * cols + c0;
      const float* dyr = dy + r * cols + c0;
      float* dzr = dz + r * cols + c0;  // may be dyr: each lane reads its element before writing it
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) {
        // The mask as bits (dy where y > 0, else +0.0): g++ 12 leaves `y > 0 ? dy : 0` feeding a
        // double sum as a branch per element (not vectorized, mispredicted half the time on
        // random signs).
        uint32_t bits;
        std::memcpy(&bits, dyr + c, sizeof bits);
        bits &= yr[c] > 0.0f ? 0xffffffffu : 0u;
        float g;
        std::memcpy(&g, &bits, sizeof g);
        dzr[c] = g;
        acc[c] += g;
      }
    }
    if (chunks == 1) {
      for (int64_t c = 0; c < w; ++c) dbias[c0 + c] = static_cast<float>(acc[c]);
    } else {
      for (int64_t c = 0; c < w; ++c) partial[k * cols + c0 + c] = acc[c];
    }
  };
  // Pass 2 (more than one chunk), a column tile: the partial rows added in chunk order.
  auto sums_pass = [&](int64_t tile) {
    const int64_t c0 = tile * kRbgColTile, c1 = std::min(cols, c0 + kRbgColTile);
    for (int64_t k = 1; k < chunks; ++k)
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) partial[c] += partial[k * cols + c];
    for (int64_t c = c0; c < c1; ++c) dbias[c] = static_cast<float>(partial[c]);
  };
  if (rows * cols < kParallelMin) {  // no parallel region at all (see parallel_for)
    for (int64_t task = 0; task < chunks * tiles; ++task) rows_pass(task);
    if (chunks > 1)
      for (int64_t tile = 0; tile < tiles; ++tile) sums_pass(tile);
    return;
  }
  // Two parallel loops: the first completes the partial rows before the second adds them.
  run_tasks(chunks * tiles, true, rows_pass);
  if (chunks > 1) run_tasks(tiles, true, sums_pass);
}

}  // namespace gpumat::host
