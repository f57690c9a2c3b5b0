// CUDA convolution family, geometry in ConvShape (../backend.h). Host reference: ../host/conv.cpp.
//   conv2d:                 x (N, C, H, W), w (F, C, KH, KW) -> y (N, F, OH, OW)
//   conv2d_gradient_input:  dy (N, F, OH, OW), w -> dx (N, C, H, W)
//   conv2d_gradient_filter: x, dy -> dw (F, C, KH, KW)
//   add_channel_bias:       out (N, C, S) = in + bias[c];  reduce_sum_channels: (N, C, S) -> (C,)
//
// Method: im2col + our tiled matmul (matmul.cu), over chunks of `chunk` images so the scratch
// (the device's persistent workspaces, see conv2d below) stays under the workspace limit. For a
// chunk of nb images:
//   im2col_kernel      col (C*KH*KW, nb*OH*OW), one thread per col element (writes coalesced)
//   matmul             y^ (F, nb*OH*OW) = w @ col;  dcol = w^T @ dy^;  dw (+)= dy^ @ col^T
//   swap_axes01_kernel (F, nb, OH*OW) <-> (nb, F, OH*OW), one thread per output element
//   col2im_kernel      dx from dcol, a gather: one thread per dx element sums the column entries
//                      that read it, in (oh, ow) order (no atomics: deterministic, same order
//                      as the host)
// With nb = 1 the two layouts coincide and the swap is skipped. Why im2col rather than a direct
// kernel: one large GEMM per chunk keeps every SM busy for small and large filters alike (a
// 64-image chunk of MNIST's second layer is a (64 x 800) @ (800 x 4096) product), and the forward
// pass and both gradients are the three transpose cases of the same matmul.
// Index arithmetic runs in 32 bits when the chunk's arrays are small enough (the common case:
// 64-bit division is several times slower on the GPU), else in 64 bits.
#include <algorithm>

#include "../window.h"
#include "common.cuh"
#include "gpumat/gpu_matrix.h"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {
constexpr int kChannelThreads = 256;  // reduce_sum_channels: blocks per channel on grid.y
// 32-bit indexing is used below this many elements (leaves room for the grid-stride increment).
constexpr int64_t kInt32Limit = int64_t{1} << 30;
}  // namespace

// ---------------------------------------------------------------------------- kernels

// x is one chunk (nb, C, H, W); col is (C*KH*KW, nb*OH*OW).
template <typename Index>
__global__ void im2col_kernel(const float* __restrict__ x, ConvShape s, Index nb, float* __restrict__ col) {
  const Index C = s.c, H = s.h, W = s.w, KH = s.kh, KW = s.kw, OH = s.oh, OW = s.ow;
  const Index SH = s.stride_h, SW = s.stride_w, PH = s.pad_h, PW = s.pad_w;
  const Index total = C * KH * KW * nb * OH * OW;
  for (Index idx = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<Index>(gridDim.x) * blockDim.x) {
    // idx = ((r * nb + b) * OH + oh) * OW + ow with r = (c * KH + i) * KW + j
    const Index ow = idx % OW;
    Index t = idx / OW;
    const Index oh = t % OH;
    t /= OH;
    const Index b = t % nb;
    const Index r = t / nb;
    const Index j = r % KW, i = (r / KW) % KH, c = r / (KW * KH);
    const Index ih = oh * SH - PH + i, iw = ow * SW - PW + j;
    float v = 0.0f;
    if (ih >= 0 && ih < H && iw >= 0 && iw < W) v = x[((b * C + c) * H + ih) * W + iw];
    col[idx] = v;
  }
}

// col is (C*KH*KW, nb*OH*OW); dx is one chunk (nb, C, H, W).
template <typename Index>
__global__ void col2im_kernel(const float* __restrict__ col, ConvShape s, Index nb, float* __restrict__ dx) {
  const Index C = s.c, H = s.h, W = s.w, KH = s.kh, KW = s.kw, OH = s.oh, OW = s.ow;
  const Index SH = s.stride_h, SW = s.stride_w, PH = s.pad_h, PW = s.pad_w;
  const Index cols = nb * OH * OW, total = nb * C * H * W;
  for (Index idx = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index iw = idx % W;
    Index t = idx / W;
    const Index ih = t % H;
    t /= H;
    const Index c = t % C;
    const Index b = t / C;
    // Windows covering (ih, iw): 0 <= ih + PH - oh*SH < KH, 0 <= oh < OH (likewise for columns).
    const Index hp = ih + PH, wp = iw + PW;
    Index oh_lo, oh_hi, ow_lo, ow_hi;
    window::covering_outputs(ih, KH, SH, PH, OH, &oh_lo, &oh_hi);
    window::covering_outputs(iw, KW, SW, PW, OW, &ow_lo, &ow_hi);
    float sum = 0.0f;
    for (Index oh = oh_lo; oh <= oh_hi; ++oh) {
      const Index i = hp - oh * SH;
      for (Index ow = ow_lo; ow <= ow_hi; ++ow) {
        const Index j = wp - ow * SW;
        sum += col[((c * KH + i) * KW + j) * cols + (b * OH + oh) * OW + ow];
      }
    }
    dx[idx] = sum;
  }
}

// in is (d0, d1, inner), out is (d1, d0, inner).
__global__ void swap_axes01_kernel(const float* __restrict__ in, int64_t d0, int64_t d1, int64_t inner,
                                   float* __restrict__ out) {
  const int64_t total = d0 * d1 * inner;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = o % inner, t = o / inner;
    const int64_t a = t % d0, b = t / d0;  // out[b, a, k] = in[a, b, k]
    out[o] = in[(a * d1 + b) * inner + k];
  }
}

// in, out are (outer, channels, inner); bias is (channels,).
__global__ void add_channel_bias_kernel(const float* in, const float* __restrict__ bias, float* out,
                                        int64_t n, int64_t channels, int64_t inner) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = in[i] + bias[(i / inner) % channels];
}

// in is (outer, channels, inner); out is (channels,); partial is (gridDim.y, channels) when
// gridDim.y > 1. Block (c, y) sums chunk y (elements [y * per_chunk, (y + 1) * per_chunk) of the
// outer * inner of channel c), in float64 like the host (see reduce.cu for why).
__global__ void reduce_sum_channels_kernel(const float* __restrict__ in, int64_t outer, int64_t channels,
                                           int64_t inner, int64_t per_chunk, float* __restrict__ out,
                                           double* __restrict__ partial) {
  const int64_t c = blockIdx.x, total = outer * inner;
  const int64_t e_begin = blockIdx.y * per_chunk;
  const int64_t e_end = e_begin + per_chunk < total ? e_begin + per_chunk : total;
  double acc = 0.0;
  for (int64_t e = e_begin + threadIdx.x; e < e_end; e += kChannelThreads) {
    const int64_t n = e / inner, k = e - n * inner;
    acc += in[(n * channels + c) * inner + k];
  }
  acc = block_sum<kChannelThreads, double>(acc);
  if (threadIdx.x == 0) {
    if (gridDim.y == 1)
      out[c] = static_cast<float>(acc);
    else
      partial[blockIdx.y * channels + c] = acc;
  }
}

// ---------------------------------------------------------------------------- launchers

namespace {

// Whether every index the kernels form fits in int32: the array offsets, and the window
// arithmetic (oh * stride - pad + i stays within [-pad, h + pad)), so the strides and paddings that
// ops/conv.cpp admits (up to 2^31 - 1) take the 64-bit path unless the padded input is small.
bool fits_int32(const ConvShape& s) {
  const int64_t col = s.c * s.kh * s.kw * s.chunk * s.oh * s.ow, x = s.chunk * s.c * s.h * s.w;
  const int64_t span_h = s.h + 2 * s.pad_h + s.kh + s.stride_h,
                span_w = s.w + 2 * s.pad_w + s.kw + s.stride_w;
  return std::max({col, x, span_h, span_w}) <= kInt32Limit;
}

void launch_im2col(int dev, const float* x, const ConvShape& s, int64_t nb, float* col, const char* op) {
  cudaStream_t stream = activate(dev);
  const int64_t total = s.c * s.kh * s.kw * nb * s.oh * s.ow;
  const unsigned grid = grid_for(total, kBlockSize);
  if (fits_int32(s))
    launch<im2col_kernel<int32_t>>(op, grid, kBlockSize, 0, stream, x, s, static_cast<int32_t>(nb), col);
  else
    launch<im2col_kernel<int64_t>>(op, grid, kBlockSize, 0, stream, x, s, nb, col);
}

void launch_col2im(int dev, const float* col, const ConvShape& s, int64_t nb, float* dx, const char* op) {
  cudaStream_t stream = activate(dev);
  const unsigned grid = grid_for(nb * s.c * s.h * s.w, kBlockSize);
  if (fits_int32(s))
    launch<col2im_kernel<int32_t>>(op, grid, kBlockSize, 0, stream, col, s, static_cast<int32_t>(nb), dx);
  else
    launch<col2im_kernel<int64_t>>(op, grid, kBlockSize, 0, stream, col, s, nb, dx);
}

void launch_swap_axes01(int dev, const float* in, int64_t d0, int64_t d1, int64_t inner, float* out,
                        const char* op) {
  cudaStream_t stream = activate(dev);
  launch<swap_axes01_kernel>(op, grid_for(d0 * d1 * inner, kBlockSize), kBlockSize, 0, stream, in, d0, d1,
                             inner, out);
}

}  // namespace

// Scratch arrays are the device's workspaces (common.cuh: kept between calls, held under
// workspace_lock() while the kernels that use them are queued), so a training step asks the
// allocator for nothing and can be captured into a CUDA graph (program.h). Slots 1-3: conv's own.
enum ConvSlot { kColSlot = 1, kSwapSlot = 2, kPartSlot = 3 };
void conv2d(int dev, const float* x, const float* w, float* y, const ConvShape& s) {
  const char* op = "conv2d";
  const int64_t ckk = s.c * s.kh * s.kw, ohw = s.oh * s.ow, chw = s.c * s.h * s.w;
  auto lock = workspace_lock();
  float* col = workspace(dev, kColSlot, ckk * s.chunk * ohw);
  float* tmp = workspace(dev, kSwapSlot, s.chunk > 1 ? s.f * s.chunk * ohw : 0);
  for (int64_t n0 = 0; n0 < s.n; n0 += s.chunk) {
    const int64_t nb = std::min(s.chunk, s.n - n0);
    launch_im2col(dev, x + n0 * chw, s, nb, col, op);
    float* yb = y + n0 * s.f * ohw;
    if (nb == 1) {
      matmul(dev, w, false, col, false, yb, s.f, ohw, ckk);
    } else {
      matmul(dev, w, false, col, false, tmp, s.f, nb * ohw, ckk);
      launch_swap_axes01(dev, tmp, s.f, nb, ohw, yb, op);
    }
  }
}

void conv2d_gradient_input(int dev, const float* dy, const float* w, float* dx, const ConvShape& s) {
  const char* op = "conv2d_gradient_input";
  const int64_t ckk = s.c * s.kh * s.kw, ohw = s.oh * s.ow, chw = s.c * s.h * s.w;
  auto lock = workspace_lock();
  float* dcol = workspace(dev, kColSlot, ckk * s.chunk * ohw);
  float* dyt = workspace(dev, kSwapSlot, s.chunk > 1 ? s.f * s.chunk * ohw : 0);
  for (int64_t n0 = 0; n0 < s.n; n0 += s.chunk) {
    const int64_t nb = std::min(s.chunk, s.n - n0);
    const float* dyb = dy + n0 * s.f * ohw;
    if (nb > 1) {
      launch_swap_axes01(dev, dyb, nb, s.f, ohw, dyt, op);
      dyb = dyt;
    }
    matmul(dev, w, true, dyb, false, dcol, ckk, nb * ohw, s.f);
    launch_col2im(dev, dcol, s, nb, dx + n0 * chw, op);
  }
}

void conv2d_gradient_filter(int dev, const float* x, const float* dy, float* dw, const ConvShape& s) {
  const char* op = "conv2d_gradient_filter";
  const int64_t ckk = s.c * s.kh * s.kw, ohw = s.oh * s.ow, chw = s.c * s.h * s.w;
  const bool chunked = s.chunk < s.n;
  auto lock = workspace_lock();
  float* col = workspace(dev, kColSlot, ckk * s.chunk * ohw);
  float* dyt = workspace(dev, kSwapSlot, s.chunk > 1 ? s.f * s.chunk * ohw : 0);
  float* part = workspace(dev, kPartSlot, chunked ? s.f * ckk : 0);
  for (int64_t n0 = 0; n0 < s.n; n0 += s.chunk) {
    const int64_t nb = std::min(s.chunk, s.n - n0);
    launch_im2col(dev, x + n0 * chw, s, nb, col, op);
    const float* dyb = dy + n0 * s.f * ohw;
    if (nb > 1) {
      launch_swap_axes01(dev, dyb, nb, s.f, ohw, dyt, op);
      dyb = dyt;
    }
    // The first chunk writes dw; later ones are added to it.
    float* target = n0 == 0 ? dw : part;
    matmul(dev, dyb, false, col, true, target, s.f, ckk, nb * ohw);
    if (n0 > 0) add(dev, dw, part, dw, s.f * ckk);
  }
}

void add_channel_bias(int dev, const float* in, const float* bias, float* out, int64_t outer,
                      int64_t channels, int64_t inner) {
  cudaStream_t stream = activate(dev);
  const int64_t n = outer * channels * inner;
  launch<add_channel_bias_kernel>("add_channel_bias", grid_for(n, kBlockSize), kBlockSize, 0, stream, in,
                                  bias, out, n, channels, inner);
}

void reduce_sum_channels(int dev, const float* in, float* out, int64_t outer, int64_t channels,
                         int64_t inner) {
  const char* op = "reduce_sum_channels";
  const GridLimits lim = grid_limits(dev);
  if (channels > lim.x) throw ShapeError(std::string(op) + ": too many channels for the CUDA grid");
  // Chunks of each channel's outer * inner elements on grid.y, so that few channels (a conv layer
  // has tens) still spread over the whole GPU.
  const int64_t total = outer * inner;
  int64_t chunks = reduce_chunks(channels, total, lim.y);
  const int64_t per_chunk = std::max<int64_t>(1, ceil_div(total, chunks));
  chunks = std::max<int64_t>(1, ceil_div(total, per_chunk));  // no empty chunk
  cudaStream_t stream = activate(dev);
  const dim3 grid(static_cast<unsigned>(channels), static_cast<unsigned>(chunks));
  if (chunks == 1) {
    launch<reduce_sum_channels_kernel>(op, grid, kChannelThreads, 0, stream, in, outer, channels, inner,
                                       per_chunk, out, static_cast<double*>(nullptr));
    return;
  }
  auto lock = workspace_lock();
  double* partial = reduce_partials(dev, chunks, channels);
  launch<reduce_sum_channels_kernel>(op, grid, kChannelThreads, 0, stream, in, outer, channels, inner,
                                     per_chunk, out, partial);
  sum_partials(dev, partial, chunks, channels, out, op);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
