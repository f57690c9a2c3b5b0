// gpumat::ops — one function per kernel, outputs passed in (the dlsys course's style, which lets
// the executor own memory). Every function checks devices, shapes and aliasing here in host C++ and
// throws ShapeError naming the op and the shapes, so no misuse can reach a kernel with bad sizes;
// it then dispatches to the device's Backend (src/backend.h).
//
// All arrays are float32, row-major, contiguous. Elementwise ops allow `out` to be an input
// (in place); the others throw ShapeError when `out` is one of their inputs. Axis arguments may be
// negative (counted from the end, as in numpy); an axis outside [-ndim, ndim) is a ShapeError. An
// array is seen as (outer, n, inner) around its axis (length n), so any axis works without a
// transpose.
//
// Grouped by kernel family, as the sources are: src/ops/<family>.cpp (checks and dispatch),
// src/cuda/<family>.cu and src/host/<family>.cpp (kernels). The fused ops (matmul_bias,
// relu_bias_gradient, cross_entropy_with_gradient, the multi-tensor optimizer steps) each
// equal a sequence of the others in one kernel launch (or two, where noted) instead of several.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpumat/gpu_matrix.h"

namespace gpumat::ops {

// ---------------------------------------------------------------------------- pointwise

// The pointwise ops declared in src/kernels.def by their shape (GPUMAT_UNARY: out = f(in);
// GPUMAT_UNARY_GRADIENT: out = g(y, dy), y the forward output; GPUMAT_BINARY: out = f(a, b);
// GPUMAT_TERNARY: out = f(cond, a, b); GPUMAT_UNARY_BOUNDS: out = f(in; lo, hi) and its gradient
// g(x, dy; lo, hi); GPUMAT_UNARY_SCALAR: out = f(in; s) and its gradient g(x, dy; s)), in every
// family: tanh, sigmoid, sqrt, abs, sin, lt, minimum, where, clamp, pow_scalar, ... Every array one
// shape on one device; out may be an input (in place).
#define GPUMAT_KERNEL(name, params)
#define GPUMAT_UNARY(name, doc) void name(const GpuMatrix& in, GpuMatrix& out);
#define GPUMAT_UNARY_GRADIENT(name, doc) void name(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& out);
#define GPUMAT_BINARY(name, doc) void name(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);
#define GPUMAT_TERNARY(name, doc) \
  void name(const GpuMatrix& cond, const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);
#define GPUMAT_UNARY_BOUNDS(name, doc) void name(const GpuMatrix& in, float lo, float hi, GpuMatrix& out);
#define GPUMAT_UNARY_BOUNDS_GRADIENT(name, doc) \
  void name(const GpuMatrix& x, const GpuMatrix& dy, float lo, float hi, GpuMatrix& out);
#define GPUMAT_UNARY_SCALAR(name, doc) void name(const GpuMatrix& in, float s, GpuMatrix& out);
#define GPUMAT_UNARY_SCALAR_GRADIENT(name, doc) \
  void name(const GpuMatrix& x, const GpuMatrix& dy, float s, GpuMatrix& out);
#include "../../src/kernels.def"

// ---------------------------------------------------------------------------- elementwise

// arr[...] = value.
void fill(GpuMatrix& arr, float value);

// All shapes equal. div: out = a / b, IEEE division (x / 0 = +-inf, 0 / 0 = NaN).
void add(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);
void mul(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);
void div(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);
// out = 1 where a == b, else 0 (IEEE equality: NaN equals nothing, -0 equals +0). All shapes equal.
void eq(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);
void add_scalar(const GpuMatrix& in, float value, GpuMatrix& out);
void mul_scalar(const GpuMatrix& in, float value, GpuMatrix& out);

// y += alpha * x (in place), same shapes.
void axpy(float alpha, const GpuMatrix& x, GpuMatrix& y);

// dst = src, same shape, same device.
void copy(const GpuMatrix& src, GpuMatrix& dst);

// out = exp(in) and out = log(in), one shape, may work in place. IEEE special values, as numpy:
// exp overflows to inf (x > ~88.7) and underflows to 0 (x < ~-103.9); log(0) = -inf,
// log(x < 0) = NaN, log(inf) = inf; NaN stays NaN.
void exp(const GpuMatrix& in, GpuMatrix& out);
void log(const GpuMatrix& in, GpuMatrix& out);

// ---------------------------------------------------------------------------- activation

// out = max(in, 0); relu_gradient: out = grad where in > 0, else 0 (the subgradient at 0 is 0).
void relu(const GpuMatrix& in, GpuMatrix& out);
void relu_gradient(const GpuMatrix& in, const GpuMatrix& grad, GpuMatrix& out);

// Inverted dropout: out[i] = 0 if uniform01(seed, i) < p, else in[i] / (1 - p), 0 <= p <= 1 (p = 1
// drops everything). The mask depends only on (seed, i) (src/random.h), so every device and the
// numpy reference drop the same elements; the gradient is dropout of dy with the same seed.
// Elementwise: may work in place.
void dropout(const GpuMatrix& in, GpuMatrix& out, float p, uint64_t seed);

// dz = dy * (y > 0) (relu_gradient with y the forward output or the pre-activation) and dbias =
// column sums of dz (sum_to_size), in one launch. y, dy, dz are (rows, cols), dbias is
// (cols,); dz may be dy; dbias must not be any of the others.
void relu_bias_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dz, GpuMatrix& dbias);

// ---------------------------------------------------------------------------- layout

// 2-D transpose: in (rows, cols) -> out (cols, rows).
void transpose(const GpuMatrix& in, GpuMatrix& out);

// dst = src with dst's shape: same number of elements, same device (the device side of reshape).
void reshape(const GpuMatrix& src, GpuMatrix& dst);

// indices (N,) holding class numbers as floats, out (N, C) with C <= 2^24: out[i, j] = 1 if
// indices[i] == j, else 0. An index outside [0, C), a non-integer or NaN gives a row of zeros (the
// device cannot raise: callers check the range first). out must not be indices.
void one_hot(const GpuMatrix& indices, GpuMatrix& out);

// ---------------------------------------------------------------------------- strided
// N-d operands read (and written) where they lie, by element strides (src/strided.h): broadcasting
// without copies, and the copies behind views and index assignment. Up to kMaxStridedDims dims.

constexpr int kMaxStridedDims = 8;

// Element strides, one per dim of the op's index space (the rest ignored): a stride 0 repeats an
// element, a negative stride walks backwards.
struct Strides {
  int64_t v[kMaxStridedDims];
};

// out = a (op) b with numpy's broadcasting: out has the broadcast shape of a and b, which are read
// in place (a dim of 1, or a missing leading dim, repeats). op: 0 add, 1 sub, 2 mul, 3 div, 4 eq,
// 5 ne, 6 lt, 7 le, 8 gt, 9 ge, 10 minimum, 11 maximum, 12 logical_and, 13 logical_or (the
// contiguous kernels' arithmetic; comparisons and logic give 1 or 0). out may be an input of its
// own shape (in place), and must not overlap a broadcast one.
void broadcast_binary(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out, int64_t op);

// out = a where cond != 0, else b, the three broadcast to out's shape (as broadcast_binary).
void broadcast_where(const GpuMatrix& cond, const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out);

// out = in summed over the dims that out repeats: out's shape, right-aligned against in's (leading
// dims may be missing), has each dim equal to in's or 1 (the gradient of a broadcast). Each sum in
// index order (deterministic). out must not overlap in.
void sum_to(const GpuMatrix& in, GpuMatrix& out);

// out[idx] = in.flat[offset + sum_d idx_d * stride.v[d]] for every index idx of out's shape: a
// permute's, slice's, flip's or expand's copy. Every address must lie inside in (else ShapeError,
// before any kernel runs); out must not overlap in.
void as_strided(const GpuMatrix& in, GpuMatrix& out, Strides stride, int64_t offset);

// out.flat[offset + sum_d idx_d * stride.v[d]] = src[idx] for every index idx of src's shape, in
// place in out (index assignment, cat). The addresses must lie inside out and be distinct (no
// element written twice); src must not overlap out.
void as_strided_scatter(const GpuMatrix& src, GpuMatrix& out, Strides stride, int64_t offset);
// tril / triu: out (in's shape, rank >= 2; may be in) = in on and below (tril) or on and above
// (triu) the `diagonal`-th diagonal of each matrix of the last two dims (j - i <= diagonal or
// j - i >= diagonal), 0 elsewhere; any leading dims are a batch.
void tril(const GpuMatrix& in, GpuMatrix& out, int64_t diagonal);
void triu(const GpuMatrix& in, GpuMatrix& out, int64_t diagonal);

// ---------------------------------------------------------------------------- reduce
// Reductions and broadcasts, each the other's gradient.

// Sums over leading axes. out's shape must be a suffix of in's shape (leading 1s in out are
// allowed): (500,200,100)->(200,100), (4,5,6)->(6,), (8,10)->(1,10).
void sum_to_size(const GpuMatrix& in, GpuMatrix& out);

// out = in repeated over leading axes. in's shape, after dropping leading 1s, must be a suffix of
// out's shape: (200,300)->(130,200,300), (1,10)->(7,10), (10,)->(7,10).
void broadcast_to(const GpuMatrix& in, GpuMatrix& out);

// Reductions along `axis`: out has in's shape with that axis removed, or kept with length 1
// (keepdims; the two layouts are identical in memory). mean and amax need the axis
// to be non-empty. amax: NaN wins. amax_gradient: dx[..., j, ...] = dy / t where
// x == y (the max), t the number of tied maxima in that slice, else 0 (ties share equally, as
// TensorFlow's amax and PyTorch's amax do).
void sum(const GpuMatrix& in, GpuMatrix& out, int64_t axis);
void mean(const GpuMatrix& in, GpuMatrix& out, int64_t axis);
void amax(const GpuMatrix& in, GpuMatrix& out, int64_t axis);
void amax_gradient(const GpuMatrix& x, const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis);

// out (in's shape with `axis` removed, or kept with length 1) = the index along `axis` of each slice's
// maximum, as a float holding the integer (PyTorch's argmax rule: the first maximum wins and a NaN
// counts as the maximum, so the first NaN wins). The axis must be non-empty (when out is not) and at
// most 2^24 long (float32 holds every index exactly); out must not be in.
void argmax(const GpuMatrix& in, GpuMatrix& out, int64_t axis);

// out (in's shape with `axis` inserted or filled back to out.dim(axis)) = scale * in repeated along
// axis: the gradient of sum (scale 1) and mean (scale 1/n).
void broadcast_dim(const GpuMatrix& in, GpuMatrix& out, int64_t axis, float scale);

// prod: out (in's shape reduced along `axis`, as for sum) = the product along axis, in index order
// (an empty axis gives 1). prod_gradient: dx (x's shape) = dy times the product of the slice's other
// elements (exact at zeros). cumsum: out (in's shape; may be in) = the running sums along axis,
// accumulated in double from the start (or from the end when reverse: cumsum's gradient).
void prod(const GpuMatrix& in, GpuMatrix& out, int64_t axis);
void prod_gradient(const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis);
void cumsum(const GpuMatrix& in, GpuMatrix& out, int64_t axis, bool reverse);

// ---------------------------------------------------------------------------- matmul

// c (M,N) = op(a) @ op(b), op(x) = x^T when the flag is set; a is (M,K) or (K,M) when trans_a,
// b is (K,N) or (N,K) when trans_b. K = 0 gives zeros.
void matmul(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, GpuMatrix& c);

// c (m, n) = op(a) @ op(b) + bias, then max(., 0) when relu: matmul, broadcast_to, add (and relu)
// in one launch. Shapes as matmul; bias is (n,). c must not be a, b or bias.
void matmul_bias(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, const GpuMatrix& bias,
                 GpuMatrix& c, bool relu);

// c[i] (M, N) = op(a[i]) @ op(b[i]) for a batch of B products, one launch. a is (Ba, M, K) or
// (Ba, K, M) when trans_a, b is (Bb, K, N) or (Bb, N, K) when trans_b; Ba and Bb are B or 1 (1: that
// matrix for every product). c is (B, M, N), or (1, M, N) for the sum of the B products (the
// gradient of a repeated operand); with Ba = Bb = 1, c's batch is B. K = 0 or B = 0 gives zeros.
// c must not be a or b.
void bmm(const GpuMatrix& a, bool trans_a, const GpuMatrix& b, bool trans_b, GpuMatrix& c);

// ---------------------------------------------------------------------------- attention
// Fused scaled dot-product attention (FlashAttention-2's tiling: the (l, s) score matrix is never
// stored). q (batch, l, e), k (batch, s, e), v (batch, s, ev) with e, ev <= 128; out (batch, l,
// ev + 1): per query row O = softmax(scale q k^T) v in the first ev columns (causal: keys after the
// query's index masked, top-left aligned) and the row's logsumexp of the scaled scores in the last
// (-inf and O = 0 for a row with no key). out differs from the inputs.
// attention_gradient: dqkv (q.size + k.size + v.size,) = dq, dk, dv one after the other (one output:
// a graph node has one value) from the forward's out and dout (out's shape; its last column the
// gradient of the logsumexp). On CUDA devices dq's sums use float atomics unless
// are_deterministic_algorithms_enabled(); dk and dv, and every host result, are deterministic.
void attention(const GpuMatrix& q, const GpuMatrix& k, const GpuMatrix& v, GpuMatrix& out, float scale,
               bool causal);
void attention_gradient(const GpuMatrix& q, const GpuMatrix& k, const GpuMatrix& v, const GpuMatrix& out,
                        const GpuMatrix& dout, GpuMatrix& dqkv, float scale, bool causal);
// attention_strided: the same over q, k, v read where they lie in one buffer qkv (any shape: the
// output of a fused q/k/v projection), sharing strides: element (b, h, r, c) of q (batch, heads, l, e)
// is qkv's element q_offset + b batch_stride + h head_stride + r row_stride + c; k (batch, heads, s, e)
// and v (batch, heads, s, ev) likewise from k_offset and v_offset. batch = out.dim(0) / heads; out is
// (batch x heads, l, ev + 1) as attention's. The heads of x.view(B, T, H, D).transpose(1, 2) for the
// three C = H D column blocks of a (B, T, 3C) x: offsets 0, C, 2C, strides (T 3C, D, 3C).
// attention_strided_gradient: dqkv (qkv's shape) holds dq, dk, dv where q, k, v lie and 0 elsewhere;
// it needs each element written once: the three regions in disjoint column ranges of qkv's rows, each
// head's dim within a row (ShapeError otherwise). Regions outside qkv, overlapping rows, and the
// checks of attention give ShapeError.
void attention_strided(const GpuMatrix& qkv, GpuMatrix& out, int64_t heads, int64_t l, int64_t s, int64_t e,
                       int64_t ev, int64_t q_offset, int64_t k_offset, int64_t v_offset, int64_t batch_stride,
                       int64_t head_stride, int64_t row_stride, float scale, bool causal);
void attention_strided_gradient(const GpuMatrix& qkv, const GpuMatrix& out, const GpuMatrix& dout,
                                GpuMatrix& dqkv, int64_t heads, int64_t l, int64_t s, int64_t e, int64_t ev,
                                int64_t q_offset, int64_t k_offset, int64_t v_offset, int64_t batch_stride,
                                int64_t head_stride, int64_t row_stride, float scale, bool causal);

// ---------------------------------------------------------------------------- softmax

// Softmax / log-softmax along `axis` of an N-d array (rank >= 1), max-subtracted (the log-sum-exp
// trick): log_softmax = x - max - log sum exp(x - max). in and out have one shape and differ. A
// matrix's softmax along its rows runs the row kernel (one block per row).
// softmax_gradient: dx = y * (dy - sum_axis y*dy) from y = softmax(x); log_softmax_gradient:
// dx = dy - exp(y) * sum_axis dy from y = log_softmax(x). An axis of length 0 leaves out empty.
void softmax(const GpuMatrix& in, GpuMatrix& out, int64_t axis);
void log_softmax(const GpuMatrix& in, GpuMatrix& out, int64_t axis);
void softmax_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis);
void log_softmax_gradient(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& dx, int64_t axis);

// ---------------------------------------------------------------------------- loss

// out (1,) = mean over rows of -sum_c labels[r,c] * log_softmax(logits)[r,c]; logits and labels
// are (rows, cols) with rows >= 1. log_softmax uses the log-sum-exp trick.
void cross_entropy(const GpuMatrix& logits, const GpuMatrix& labels, GpuMatrix& out);

// loss (1,) = cross_entropy(logits, labels) and grad (rows, cols) = (softmax(logits) -
// labels) / rows, the gradient of that mean loss: one launch on CUDA (the last block to finish
// takes the mean), instead of five. logits and labels are (rows, cols) with rows, cols >= 1; the outputs are
// distinct from the inputs and from each other.
void cross_entropy_with_gradient(const GpuMatrix& logits, const GpuMatrix& labels, GpuMatrix& loss,
                                 GpuMatrix& grad);

// Negative log-likelihood with one-hot (or any probability-row) targets: log_probs and target are
// (rows, cols), rows >= 1; out (1,) = -sum target * log_probs / rows. nll_loss_gradient: out_grad
// (rows, cols) = -dloss[0] / rows * target, the gradient with respect to log_probs.
void nll_loss(const GpuMatrix& log_probs, const GpuMatrix& target, GpuMatrix& out);
void nll_loss_gradient(const GpuMatrix& target, const GpuMatrix& dloss, GpuMatrix& out_grad);

// Regression losses: pred and target of one shape with >= 1 element, out (1,).
// mse_loss = mean (pred - target)^2; l1_loss = mean |pred - target|. The gradients with respect
// to pred, times the loss's output gradient dloss (1,): 2 (pred - target) / n * dloss and
// sign(pred - target) / n * dloss (sign(0) = 0, the subgradient PyTorch uses); out_grad has pred's shape.
void mse_loss(const GpuMatrix& pred, const GpuMatrix& target, GpuMatrix& out);
void l1_loss(const GpuMatrix& pred, const GpuMatrix& target, GpuMatrix& out);
void mse_loss_gradient(const GpuMatrix& pred, const GpuMatrix& target, const GpuMatrix& dloss,
                       GpuMatrix& out_grad);
void l1_loss_gradient(const GpuMatrix& pred, const GpuMatrix& target, const GpuMatrix& dloss,
                      GpuMatrix& out_grad);

// ---------------------------------------------------------------------------- conv

// im2col + our matmul, over chunks of the batch.
// Cross-correlation as in every DL framework (the filter is not flipped), zero padding:
//   y[n, f, oh, ow] = sum_{c,i,j} x[n, c, oh*stride_h - pad_h + i, ow*stride_w - pad_w + j] w[f, c, i, j]
// with x (N, C, H, W), w (F, C, KH, KW), y (N, F, OH, OW), OH = (H + 2*pad_h - KH) / stride_h + 1
// (floor; likewise OW). 1 <= strides, KH, KW <= 2^31 - 1 and 0 <= padding <= 2^31 - 1 (the CUDA
// kernels' index range; enforced on every device); an output size < 1 is a ShapeError.
// conv2d_gradient_input writes dx = dL/dx (N, C, H, W) from dy = dL/dy and w;
// conv2d_gradient_filter writes dw = dL/dw (F, C, KH, KW) from x and dy. Outputs must not alias inputs.
void conv2d(const GpuMatrix& x, const GpuMatrix& w, GpuMatrix& y, int64_t stride_h, int64_t stride_w,
            int64_t pad_h, int64_t pad_w);
void conv2d_gradient_input(const GpuMatrix& dy, const GpuMatrix& w, GpuMatrix& dx, int64_t stride_h,
                           int64_t stride_w, int64_t pad_h, int64_t pad_w);
void conv2d_gradient_filter(const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dw, int64_t stride_h,
                            int64_t stride_w, int64_t pad_h, int64_t pad_w);
// The same for sequences: x (N, C, W), w (F, C, K), y (N, F, OW); conv2d with H = KH = 1.
void conv1d(const GpuMatrix& x, const GpuMatrix& w, GpuMatrix& y, int64_t stride, int64_t pad);
void conv1d_gradient_input(const GpuMatrix& dy, const GpuMatrix& w, GpuMatrix& dx, int64_t stride,
                           int64_t pad);
void conv1d_gradient_filter(const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dw, int64_t stride,
                            int64_t pad);

// The im2col scratch limit in bytes (default 64 MiB): convolutions process as many images at once
// as fit (at least one). Returns the previous limit; `bytes` must be >= 0 (0: one image at a time).
int64_t set_conv_workspace_limit(int64_t bytes);

// out (N, C, ...) = in + bias[c] for in (N, C, ...) of rank >= 2 and bias (C,): a per-channel bias
// (conv outputs; for (N, C) it is the dense-layer bias). May work in place.
void add_channel_bias(const GpuMatrix& in, const GpuMatrix& bias, GpuMatrix& out);
// out (C,) = sum of in (N, C, ...) over every axis but axis 1: the gradient of add_channel_bias.
void reduce_sum_channels(const GpuMatrix& in, GpuMatrix& out);

// ---------------------------------------------------------------------------- pool

// Pooling over the (H, W) planes of x (N, C, H, W) -> y (N, C, OH, OW),
// OH = (H + 2*pad_h - KH) / stride_h + 1 (floor). Kernel and strides in [1, 2^31 - 1],
// 0 <= pad <= kernel / 2 (so every window holds an element of x), output size >= 1.
// max_pool2d: padding never wins (it is -inf); ties go to the first maximum in row-major window
// order, and a NaN in a window wins (the first NaN). max_pool2d_gradient recomputes that argmax
// from x (no index array is stored) and routes each dy to exactly that one element of dx.
// avg_pool2d: the mean over the kernel window, padding counted as zeros (the divisor is always
// KH*KW: PyTorch's count_include_pad=True). avg_pool2d_gradient: dx from dy.
void max_pool2d(const GpuMatrix& x, GpuMatrix& y, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                int64_t stride_w, int64_t pad_h, int64_t pad_w);
void max_pool2d_gradient(const GpuMatrix& x, const GpuMatrix& dy, GpuMatrix& dx, int64_t kernel_h,
                         int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w);
void avg_pool2d(const GpuMatrix& x, GpuMatrix& y, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                int64_t stride_w, int64_t pad_h, int64_t pad_w);
void avg_pool2d_gradient(const GpuMatrix& dy, GpuMatrix& dx, int64_t kernel_h, int64_t kernel_w,
                         int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w);
// adaptive_avg_pool2d: x (N, C, H, W) -> y (N, C, OH, OW), H, W, OH, OW >= 1 (any N, C; OH > H
// allowed); y[oh, ow] = the mean of x's rows [floor(oh H / OH), ceil((oh + 1) H / OH)) and columns
// likewise (PyTorch's adaptive windows). adaptive_avg_pool2d_gradient: dx (N, C, H, W) from dy.
void adaptive_avg_pool2d(const GpuMatrix& x, GpuMatrix& y);
void adaptive_avg_pool2d_gradient(const GpuMatrix& dy, GpuMatrix& dx);

// ---------------------------------------------------------------------------- rnn

// Fused recurrent cells (formulas in src/rnn_cell.h; PyTorch's gate orders), N rows, hidden size H.
// lstm_cell: gates (N, 4H) (i, f, g, o pre-activations), c (N, H) -> out (N, 2H) = [h' | c'];
// lstm_cell_gradient: from y = that out and dy (N, 2H) -> out (N, 5H) = [d gates | dc].
// gru_cell: gi, gh (N, 3H) (r, z, n of x W_ih^T + b_ih and h W_hh^T + b_hh), hx (N, H) ->
// out (N, H); gru_cell_gradient: from dy (N, H) -> out (N, 7H) = [d gi | d gh | d hx].
// The output may not overlap an input.
void lstm_cell(const GpuMatrix& gates, const GpuMatrix& c, GpuMatrix& out);
void lstm_cell_gradient(const GpuMatrix& gates, const GpuMatrix& c, const GpuMatrix& y, const GpuMatrix& dy,
                        GpuMatrix& out);
void gru_cell(const GpuMatrix& gi, const GpuMatrix& gh, const GpuMatrix& hx, GpuMatrix& out);
void gru_cell_gradient(const GpuMatrix& gi, const GpuMatrix& gh, const GpuMatrix& hx, const GpuMatrix& dy,
                       GpuMatrix& out);

// ---------------------------------------------------------------------------- random

// Counter-based random fills: element i depends only on (seed, i), so host and CUDA give the same
// values for the same seed. uniform in [low, high); normal through Box-Muller.
void uniform(GpuMatrix& out, float low, float high, uint64_t seed);
void normal(GpuMatrix& out, float mean, float stddev, uint64_t seed);
// Integers in [low, high) (high > low, both within 2^24 in magnitude: exact in float32), uniform up to
// a bias below 2^-38: element i is low + (64 bits of (seed, i)) mod (high - low).
void randint(GpuMatrix& out, int64_t low, int64_t high, uint64_t seed);

// ---------------------------------------------------------------------------- sort

// Along `axis` of in (any rank >= 1; a negative axis counts from the end): the indices (as floats,
// exact: the axis is at most 2^24 long) of the first k elements of each slice in sorted order, k
// = indices' length along the axis (indices is in's shape but for that length, 0 <= k <= n).
// Ascending, or descending when `descending`; always the stable order (ties by index), a NaN
// sorting as the largest value (PyTorch's torch.sort(stable=True) and torch.topk order).
void argsort(const GpuMatrix& in, GpuMatrix& indices, int64_t axis, bool descending);
// out[..., r, ...] = in[..., index[..., r, ...], ...] along `axis` (torch.gather with index of
// out's shape, in's shape but along the axis). An index outside [0, n) or not an integer gives NaN.
void gather(const GpuMatrix& in, const GpuMatrix& index, GpuMatrix& out, int64_t axis);
// gather's gradient: out (in's shape) = dy's values summed into the positions index names along
// `axis` (torch.scatter_add on zeros), summed in index order (deterministic); others 0.
void gather_gradient(const GpuMatrix& index, const GpuMatrix& dy, GpuMatrix& out, int64_t axis);

// ---------------------------------------------------------------------------- optim

// One Adam step in place (Kingma & Ba, "Adam: A Method for
// Stochastic Optimization", ICLR 2015, Algorithm 1), for step t >= 1:
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// param, grad, m, v have one shape and are four different arrays; 0 <= beta < 1, lr >= 0, eps >= 0.
void adam_update(GpuMatrix& param, const GpuMatrix& grad, GpuMatrix& m, GpuMatrix& v, float lr, float beta1,
                 float beta2, float eps, int64_t step);

// params[i] -= lr * (grads[i] + weight_decay * params[i]) for every i (SGD, Robbins & Monro 1951,
// with torch.optim.SGD's coupled L2 weight decay), one launch per 32 tensors on CUDA. All arrays
// on one device; params[i] and grads[i] have one shape; no parameter appears twice or is also a
// gradient; lr and weight_decay finite and >= 0; at most 2^31 - 1 tensors.
void sgd_update(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads, float lr,
                float weight_decay = 0.0f);

// Momentum SGD for every i (torch.optim.SGD's form; Polyak 1964, Sutskever et al. 2013):
//   g = grads[i] + weight_decay * params[i]
//   velocities[i] = momentum * velocities[i] + (1 - dampening) * g
//   params[i] -= lr * (nesterov ? g + momentum * velocities[i] : velocities[i])
// one launch per 32 tensors on CUDA. Lists of one length, all on one device, each tensor's three
// arrays of one shape; no parameter or velocity shares memory with any other array; lr and
// weight_decay finite and >= 0, 0 <= momentum < 1, 0 <= dampening <= 1.
void momentum_sgd_update(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads,
                         const std::vector<GpuMatrix*>& velocities, float lr, float momentum,
                         float dampening = 0.0f, float weight_decay = 0.0f, bool nesterov = false);

// adam_update for every tensor i (params[i], grads[i], m[i], v[i]) at one step t, one launch per 32
// tensors on CUDA. Lists as momentum_sgd_update (params, m and v written); scalars as adam_update.
// weight_decay (finite, >= 0): coupled (grads[i] + weight_decay * params[i], torch.optim.Adam) or,
// with decoupled, params[i] *= 1 - lr * weight_decay before the step (AdamW, Loshchilov & Hutter
// 2019). max_v empty, or one array per tensor (written) for AMSGrad (Reddi et al. 2018):
// max_v[i] = max(max_v[i], v[i]) replaces v[i] in the denominator.
void adam_update_multi(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads,
                       const std::vector<GpuMatrix*>& m, const std::vector<GpuMatrix*>& v, float lr,
                       float beta1, float beta2, float eps, int64_t step, float weight_decay = 0.0f,
                       bool decoupled = false, const std::vector<GpuMatrix*>& max_v = {});

// out (1,) = the norm_type-norm of all the elements of xs together (torch.nn.utils.clip_grad_norm_'s
// total norm): (sum |x|^p)^(1/p) for a finite p > 0, max |x| for p = inf; 0 for no element. One
// launch per 32 tensors and one to finish on CUDA. xs on out's device, any shapes.
void total_norm_multi(const std::vector<const GpuMatrix*>& xs, float norm_type, GpuMatrix& out);

// xs[i] *= min(1, max_norm / (total_norm + 1e-6)) for every i, in place, total_norm a (1,) array
// on xs' device (read there: no copy to the host); clip_grad_norm_'s scale. One launch per 32
// tensors on CUDA. No array written twice; max_norm finite and >= 0.
void clip_scale_multi(const std::vector<GpuMatrix*>& xs, const GpuMatrix& total_norm, float max_norm);

// Adadelta for every tensor i, in place (Zeiler, "ADADELTA: An Adaptive Learning Rate Method",
// 2012, Algorithm 1, with PyTorch's lr factor; torch.optim.Adadelta without weight decay):
//   square_avgs[i] = rho * square_avgs[i] + (1 - rho) * grads[i]^2
//   d = sqrt(acc_deltas[i] + eps) / sqrt(square_avgs[i] + eps) * grads[i]
//   acc_deltas[i] = rho * acc_deltas[i] + (1 - rho) * d^2;  params[i] -= lr * d
// one launch per 32 tensors on CUDA. Lists as momentum_sgd_update (params, square_avgs and
// acc_deltas written; both start at zero); lr finite and >= 0, 0 <= rho <= 1, eps finite and > 0.
void adadelta_update_multi(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads,
                           const std::vector<GpuMatrix*>& square_avgs,
                           const std::vector<GpuMatrix*>& acc_deltas, float lr, float rho, float eps);

// ---------------------------------------------------------------------------- index

// Along dim `dim` of in (negative counts from the end; the array seen as (outer, n, inner)) with
// index a 1-D array of len integers held in float32: a value in [-n, n) names a row (negative from
// the end, as x[-1]); any other names none (NaN output, or no write), never an access out of
// bounds (the Tensor front end raises IndexError first). n <= 2^24 (float32 holds the integers).
// out = in with dim's length len: out[o, j, i] = in[o, index[j], i]. out is neither input.
void index_select(const GpuMatrix& in, int64_t dim, const GpuMatrix& index, GpuMatrix& out);
// out[o, index[j], i] += alpha * src[o, j, i] in place; src is out's shape with dim's length len.
// Deterministic: every element sums its contributions in increasing j (no atomics).
void index_add(GpuMatrix& out, int64_t dim, const GpuMatrix& index, const GpuMatrix& src, float alpha);
// out[o, index[j], i] = src[o, j, i] in place; of repeated indices the last j wins.
void index_copy(GpuMatrix& out, int64_t dim, const GpuMatrix& index, const GpuMatrix& src);

// ---------------------------------------------------------------------------- norm

// Layer norm (Ba et al. 2016) and RMS norm (rms: Zhang & Sennrich 2019) over the trailing dims of x
// whose sizes multiply to d = weight.size() (rows = x.size() / d): out = (x - mean) * rstd * weight
// + bias, rstd = 1 / sqrt(var + eps); RMS: mean = 0 and var = mean(x^2). weight and bias hold d
// values (any shape), out is x's shape and not x. Statistics two-pass, summed in a fixed order.
void layer_norm(const GpuMatrix& x, const GpuMatrix& weight, const GpuMatrix& bias, GpuMatrix& out, float eps,
                bool rms);
// stats (rows, 2) = [mean, rstd] of each row of x (rows from stats: d = x.size() / rows).
void layer_norm_stats(const GpuMatrix& x, GpuMatrix& stats, float eps, bool rms);
// dx (x's shape) from dy (x's shape), x, its stats and weight: dx = rstd (g - mean(g) - xhat
// mean(g xhat)), g = dy weight, xhat = (x - mean) rstd (RMS: without mean(g)).
void layer_norm_gradient(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& weight,
                         const GpuMatrix& dy, GpuMatrix& dx, bool rms);
// dweight (d values) = sum over rows of dy * xhat; deterministic (rows summed in order).
void layer_norm_weight_gradient(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& dy,
                                GpuMatrix& dweight);
// dx (x's shape), dweight and dbias (d values each: dbias the column sums of dy) of layer_norm at
// once from x, weight and dy, the statistics computed inside: layer_norm_stats, layer_norm_gradient,
// layer_norm_weight_gradient and dy's column sums in one call (to float32 rounding).
void layer_norm_backward(const GpuMatrix& x, const GpuMatrix& weight, const GpuMatrix& dy, GpuMatrix& dx,
                         GpuMatrix& dweight, GpuMatrix& dbias, float eps, bool rms);
// Batch norm (Ioffe & Szegedy 2015) of x (N, C, ...) per channel: stats (C, 2) = [mean, biased var]
// over every axis but 1.
void batch_norm_stats(const GpuMatrix& x, GpuMatrix& stats);
// out = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c] with stats (C, 2) = [mean, var]
// (batch statistics, or the running ones in eval mode); weight, bias (C,); out is not x.
void batch_norm(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& weight, const GpuMatrix& bias,
                GpuMatrix& out, float eps);
// dx from dy: training (stats are x's own) the full gradient w rstd (dy - mean(dy) - xhat
// mean(dy xhat)) over each channel; eval (fixed stats) w rstd dy.
void batch_norm_gradient(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& weight,
                         const GpuMatrix& dy, GpuMatrix& dx, float eps, bool training);
// dweight (C,) = sum over each channel of dy * xhat.
void batch_norm_weight_gradient(const GpuMatrix& x, const GpuMatrix& stats, const GpuMatrix& dy,
                                GpuMatrix& dweight, float eps);

// ---------------------------------------------------------------------------- determinism

// Whether ops with a faster nondeterministic kernel take their deterministic one instead
// (PyTorch's torch.use_deterministic_algorithms): process-wide, for calls from any thread, read
// by each call (a CUDA graph keeps the kernel it captured). Off by default. Today one op differs:
// attention_gradient on CUDA devices, whose fast path adds dq's per-key-tile sums with float
// atomics; every other op gives the same bits on every run either way.
bool are_deterministic_algorithms_enabled();
void use_deterministic_algorithms(bool mode);

// ---------------------------------------------------------------------------- op counting

// Calls of the ops above that reached `device` (passed their checks) since the process started:
// each is one kernel launch on CUDA, except the few that launch two or three (conv, the losses'
// means). The benchmarks' "launches per step".
int64_t op_count(const Device& device);
// Adds n calls to `device`'s op_count: a replayed CUDA graph (program.h) makes its captured calls
// on the device without passing through the functions above.
void count_ops(const Device& device, int64_t n);

// ---------------------------------------------------------------------------- host threads

// The threads the host kernels use (gpumat's thread pool, src/host/thread_pool.cpp): their parallel
// loops and the BLAS's sgemm pieces (one count for both). Starts at OpenMP's default
// (OMP_NUM_THREADS, else the cores; 1 in a build without OpenMP); set_num_threads(n) sets both,
// process-wide, for calls from any thread. Throws ShapeError for n < 1.
int get_num_threads();
void set_num_threads(int n);
// The threads the next host loop or product would use: get_num_threads(), lowered to the cores
// other processes leave free when GPUMAT_DYNAMIC_THREADS=1 (Linux's /proc/stat, sampled at most
// every 50 ms; results are the same bits whatever the count).
int effective_num_threads();

// ---------------------------------------------------------------------------- host BLAS

// Makes the host kernels' sgemm oneDNN's dnnl_sgemm from the shared library at `path` (the
// onednn-cpu-gomp wheel's libdnnl.so.3; gpumat.__init__ finds it), after checking that it is an
// OpenMP build (whose threads gpumat can hold to one a call) and that a small product of each transpose is
// right; returns its name. Throws ShapeError (naming the path) when it cannot be loaded or fails the check,
// OpenBLAS staying in use. Loading again returns the library in use.
std::string use_onednn(const std::string& path);
// The host BLAS in use: "oneDNN 3.2.0 (...)" or OpenBLAS's build string.
std::string host_blas();

}  // namespace gpumat::ops
