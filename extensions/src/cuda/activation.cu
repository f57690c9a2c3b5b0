// CUDA activation family. Host reference: ../host/activation.cpp.
// Pointwise, every array (n,), `out` may alias an input:
//   relu:             out = x < 0 ? 0 : x             (NaN passes through)
//   relu_gradient:    out = x > 0 ? dy : 0            (the subgradient at 0 is 0; a NaN x gives NaN)
//   tanh:             out = tanh(x)
//   sigmoid:          out = 1 / (1 + exp(-x))
//   tanh_gradient:    out = dy * (1 - y^2)        (y = tanh(x), the forward output)
//   sigmoid_gradient: out = dy * y * (1 - y)      (y = sigmoid(x))
//   dropout:          out = u_i < p ? 0 : x * scale, u_i = uniform01(seed, i), scale = 1/(1-p)
//   gelu:       out = x Phi(x);  gelu_gradient: dy (Phi(x) + x phi(x)), Phi(x) = erfc(-x / sqrt 2) / 2
//               (the same as (1 + erf(x / sqrt 2)) / 2, which cancels for x < 0: erfc keeps the
//               lower tail's relative accuracy)
//   gelu_tanh:  out = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi); its gradient in
//               PyTorch's arrangement (GeluKernel.cpp)
//   silu:       out = x sigmoid(x);  silu_gradient: dy s (1 + x (1 - s)), s = sigmoid(x)
//   softplus:   out = x if beta x > threshold, else (max(z, 0) + log1p(exp(-|z|))) / beta, z = beta x
//               (lo = beta, hi = threshold);  softplus_gradient: dy, or dy sigmoid(beta x)
//   leaky_relu: out = x > 0 ? x : s x;  leaky_relu_gradient: x > 0 ? dy : s dy
//   elu:        out = x > 0 ? x : s expm1(x);  elu_gradient: x > 0 ? dy : dy s exp(x)
//   hardtanh_gradient: out = x <= lo || x >= hi ? 0 : dy (PyTorch's test: a NaN x passes dy)
// The gradients of these take the forward input x (in the `y` slot of the unary gradient shape).
// NOTE: sigmoid evaluates exp of a non-positive number only (exp(-|x|)), so it never overflows.
// dropout's mask comes from ../random.h's counter-based uniform01, so it equals the host's (and
// the numpy reference's) mask for the same seed. Grid-stride, one thread per element (relu and
// relu_gradient through common.cuh's launch_map).
// relu_bias_gradient: y, dy, dz (rows, cols), dbias (cols,): dz = dy * (y > 0) and dbias = the
// column sums of dz, in one kernel over (column tile, row chunk) blocks, float64 partial sums in
// shared memory, then reduce.cu's sum_partials over the chunks (deterministic, no atomics).
#include <algorithm>

#include "../random.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

// ---------------------------------------------------------------------------- kernels

__device__ __forceinline__ float stable_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

// in, out are (n,); Kind 0 is tanh, 1 is sigmoid
template <int Kind>
__global__ void activation_kernel(const float* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = Kind == 0 ? tanhf(in[i]) : stable_sigmoid(in[i]);
}

// y, dy, out are (n,)
template <int Kind>
__global__ void activation_gradient_kernel(const float* y, const float* dy, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = y[i];
    out[i] = Kind == 0 ? dy[i] * (1.0f - v * v) : dy[i] * v * (1.0f - v);
  }
}

// in, out are (n,)
__global__ void dropout_kernel(const float* in, float* out, int64_t n, float p, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = rng::uniform01(seed, static_cast<uint64_t>(i)) < p ? 0.0f : in[i] * scale;
}

// ---------------------------------------------------------------------------- launchers

// NOTE: a comparison, not fmaxf, so NaN passes through as on the host.
void relu(int dev, const float* in, float* out, int64_t n) {
  launch_map("relu", dev, out, n, [=] __device__(int64_t i) {
    float x = in[i];
    return x < 0.0f ? 0.0f : x;
  });
}

// NOTE: the subgradient at exactly 0 is 0; a NaN input gives NaN.
void relu_gradient(int dev, const float* in, const float* grad, float* out, int64_t n) {
  launch_map("relu_gradient", dev, out, n, [=] __device__(int64_t i) {
    float x = in[i];
    return x > 0.0f ? grad[i] : (x != x ? x : 0.0f);
  });
}

void tanh(int dev, const float* in, float* out, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<activation_kernel<0>>("tanh", grid_for(n, kBlockSize), kBlockSize, 0, stream, in, out, n);
}

void sigmoid(int dev, const float* in, float* out, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<activation_kernel<1>>("sigmoid", grid_for(n, kBlockSize), kBlockSize, 0, stream, in, out, n);
}

void tanh_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<activation_gradient_kernel<0>>("tanh_gradient", grid_for(n, kBlockSize), kBlockSize, 0, stream, y,
                                        dy, out, n);
}

void sigmoid_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  cudaStream_t stream = activate(dev);
  launch<activation_gradient_kernel<1>>("sigmoid_gradient", grid_for(n, kBlockSize), kBlockSize, 0, stream, y,
                                        dy, out, n);
}

void dropout(int dev, const float* in, float* out, int64_t n, float p, float scale, uint64_t seed) {
  cudaStream_t stream = activate(dev);
  launch<dropout_kernel>("dropout", grid_for(n, kBlockSize), kBlockSize, 0, stream, in, out, n, p, scale,
                         seed);
}

// ---------------------------------------------------------------------------- gelu, silu, ...

namespace {
constexpr float kInvSqrt2 = 0.70710678118654752f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi), the normal density's factor
constexpr float kGeluBeta = 0.79788456080286536f;    // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;
}  // namespace

void gelu(int dev, const float* in, float* out, int64_t n) {
  launch_map("gelu", dev, out, n, [=] __device__(int64_t i) {
    const float x = in[i];
    return 0.5f * x * erfcf(-x * kInvSqrt2);
  });
}

void gelu_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  launch_map("gelu_gradient", dev, out, n, [=] __device__(int64_t i) {
    const float x = y[i];
    const float cdf = 0.5f * erfcf(-x * kInvSqrt2);
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return dy[i] * (cdf + x * pdf);
  });
}

void gelu_tanh(int dev, const float* in, float* out, int64_t n) {
  launch_map("gelu_tanh", dev, out, n, [=] __device__(int64_t i) {
    const float x = in[i];
    const float inner = kGeluBeta * (x + kGeluKappa * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  });
}

void gelu_tanh_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  launch_map("gelu_tanh_gradient", dev, out, n, [=] __device__(int64_t i) {
    const float x = y[i];
    const float x_sq = x * x;
    const float t = tanhf(kGeluBeta * (x + kGeluKappa * x_sq * x));
    const float left = 0.5f * (1.0f + t);
    const float right = 0.5f * x * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq);
    return dy[i] * (left + right);
  });
}

void silu(int dev, const float* in, float* out, int64_t n) {
  launch_map("silu", dev, out, n, [=] __device__(int64_t i) {
    const float x = in[i];
    return x * stable_sigmoid(x);
  });
}

void silu_gradient(int dev, const float* y, const float* dy, float* out, int64_t n) {
  launch_map("silu_gradient", dev, out, n, [=] __device__(int64_t i) {
    const float x = y[i];
    const float s = stable_sigmoid(x);
    return dy[i] * s * (1.0f + x * (1.0f - s));
  });
}

void softplus(int dev, const float* in, float lo, float hi, float* out, int64_t n) {
  launch_map("softplus", dev, out, n, [=] __device__(int64_t i) {
    const float x = in[i];
    const float z = x * lo;
    if (z > hi) return x;
    return (fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z)))) / lo;
  });
}

void softplus_gradient(int dev, const float* x, const float* dy, float lo, float hi, float* out, int64_t n) {
  launch_map("softplus_gradient", dev, out, n, [=] __device__(int64_t i) {
    const float z = x[i] * lo;
    return z > hi ? dy[i] : dy[i] * stable_sigmoid(z);
  });
}

void leaky_relu(int dev, const float* in, float s, float* out, int64_t n) {
  launch_map("leaky_relu", dev, out, n, [=] __device__(int64_t i) {
    const float x = in[i];
    return x > 0.0f ? x : x * s;
  });
}

void leaky_relu_gradient(int dev, const float* x, const float* dy, float s, float* out, int64_t n) {
  launch_map("leaky_relu_gradient", dev, out, n,
             [=] __device__(int64_t i) { return x[i] > 0.0f ? dy[i] : dy[i] * s; });
}

void elu(int dev, const float* in, float s, float* out, int64_t n) {
  launch_map("elu", dev, out, n, [=] __device__(int64_t i) {
    const float x = in[i];
    return x > 0.0f ? x : s * expm1f(x);
  });
}

void elu_gradient(int dev, const float* x, const float* dy, float s, float* out, int64_t n) {
  launch_map("elu_gradient", dev, out, n,
             [=] __device__(int64_t i) { return x[i] > 0.0f ? dy[i] : dy[i] * (s * expf(x[i])); });
}

void hardtanh_gradient(int dev, const float* x, const float* dy, float lo, float hi, float* out, int64_t n) {
  launch_map("hardtanh_gradient", dev, out, n,
             [=] __device__(int64_t i) { return x[i] <= lo || x[i] >= hi ? 0.0f : dy[i]; });
}

// ---------------------------------------------------------------------------- relu_bias_gradient

namespace {
constexpr int kRbgCols = 32;       // columns per block (one warp wide: coalesced rows)
constexpr int kRbgRowThreads = 8;  // threads down the rows of each column
}  // namespace

// y, dy, dz are (rows, cols), dbias is (cols,): dz = dy * (y > 0) and dbias = column sums of dz, in
// one kernel. Grid (column tiles, row chunks), as reduce.cu's reduce_sum_axis_zero: block (x, y)
// covers 32 columns of rows [y * chunk_rows, (y + 1) * chunk_rows); each thread walks a strided set
// of those rows of one column in float64, the kRbgRowThreads partial sums of a column are added in
// shared memory in a fixed order, and with several chunks each block writes its chunk's sums to
// `partial` (gridDim.y, cols) for sum_partials, so dbias is deterministic. Why chunks: one block
// per 32 columns gave a (1000, 256) gradient 8 blocks, 8 of an H100's 132 SMs (gpumat.profile).
// dz may alias dy (each element is read, then written, by the same thread).
__global__ void relu_bias_gradient_kernel(const float* y, const float* dy, float* dz, float* dbias,
                                          int64_t rows, int64_t cols, int64_t chunk_rows, double* partial) {
  __shared__ double lane_sums[kRbgRowThreads][kRbgCols + 1];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kRbgCols) + threadIdx.x;
  const int64_t r_begin = blockIdx.y * chunk_rows;
  const int64_t r_end = r_begin + chunk_rows < rows ? r_begin + chunk_rows : rows;
  double acc = 0.0;
  if (c < cols)
    for (int64_t r = r_begin + threadIdx.y; r < r_end; r += kRbgRowThreads) {
      const int64_t i = r * cols + c;
      const float g = y[i] > 0.0f ? dy[i] : 0.0f;
      dz[i] = g;
      acc += g;
    }
  lane_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double sum = 0.0;
    for (int j = 0; j < kRbgRowThreads; ++j) sum += lane_sums[j][threadIdx.x];
    if (gridDim.y == 1)
      dbias[c] = static_cast<float>(sum);
    else
      partial[blockIdx.y * cols + c] = sum;
  }
}

void relu_bias_gradient(int dev, const float* y, const float* dy, float* dz, float* dbias, int64_t rows,
                        int64_t cols) {
  const char* op = "relu_bias_gradient";
  const GridLimits lim = grid_limits(dev);
  const int64_t col_tiles = ceil_div(cols, kRbgCols);
  if (col_tiles > lim.x) throw ShapeError("relu_bias_gradient: too many columns");
  int64_t chunks = reduce_chunks(col_tiles, rows * kRbgCols, lim.y);
  // rows may be 0 (dbias is then zeros): one chunk of no rows.
  const int64_t chunk_rows = std::max<int64_t>(1, ceil_div(rows, chunks));
  chunks = std::max<int64_t>(1, ceil_div(rows, chunk_rows));  // no empty chunk
  cudaStream_t stream = activate(dev);
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(chunks));
  const dim3 block(kRbgCols, kRbgRowThreads);
  if (chunks == 1) {
    launch<relu_bias_gradient_kernel>(op, grid, block, 0, stream, y, dy, dz, dbias, rows, cols, chunk_rows,
                                      static_cast<double*>(nullptr));
    return;
  }
  auto lock = workspace_lock();  // the partials live in the device's workspace (common.cuh)
  double* partial = reduce_partials(dev, chunks, cols);
  launch<relu_bias_gradient_kernel>(op, grid, block, 0, stream, y, dy, dz, dbias, rows, cols, chunk_rows,
                                    partial);
  sum_partials(dev, partial, chunks, cols, dbias, op);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
