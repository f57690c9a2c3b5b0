// Host rnn family (the reference for ../cuda/rnn.cu): the fused recurrent cells with ../rnn_cell.h's
// arithmetic (the CUDA kernels'), but its sigmoid and tanh from vec_math.h (vsigmoid, vtanh: SIMD,
// where the C library's expf and tanhf are a call per element; float32 rounding apart from CUDA).
// Each row of the (n, h) state is a SIMD loop over its h columns, compiled also for AVX2 and
// AVX-512; the rows are split across the threads.
#include "../rnn_cell.h"
#include "kernels.h"
#include "parallel.h"
#include "vec_math.h"

namespace gpumat::host {

namespace {
struct SimdMath {
  [[gnu::always_inline]] static float sigmoid(float x) { return vsigmoid(x); }
  [[gnu::always_inline]] static float tanh(float x) { return vtanh(x); }
};

GPUMAT_SIMD_CLONES void lstm_row(const float* gates, const float* c, float* out, int64_t r, int64_t h) {
#pragma omp simd
  for (int64_t j = 0; j < h; ++j) rnn_cell::lstm<SimdMath>(gates, c, out, r, j, h);
}

GPUMAT_SIMD_CLONES void lstm_gradient_row(const float* gates, const float* c, const float* y, const float* dy,
                                          float* out, int64_t r, int64_t h) {
#pragma omp simd
  for (int64_t j = 0; j < h; ++j) rnn_cell::lstm_gradient<SimdMath>(gates, c, y, dy, out, r, j, h);
}

GPUMAT_SIMD_CLONES void gru_row(const float* gi, const float* gh, const float* hx, float* out, int64_t r,
                                int64_t h) {
#pragma omp simd
  for (int64_t j = 0; j < h; ++j) rnn_cell::gru<SimdMath>(gi, gh, hx, out, r, j, h);
}

GPUMAT_SIMD_CLONES void gru_gradient_row(const float* gi, const float* gh, const float* hx, const float* dy,
                                         float* out, int64_t r, int64_t h) {
#pragma omp simd
  for (int64_t j = 0; j < h; ++j) rnn_cell::gru_gradient<SimdMath>(gi, gh, hx, dy, out, r, j, h);
}
}  // namespace

void lstm_cell(int, const float* gates, const float* c, float* out, int64_t n, int64_t h) {
  parallel_for(n, n * h * 8, [&](int64_t r) { lstm_row(gates, c, out, r, h); });
}

void lstm_cell_gradient(int, const float* gates, const float* c, const float* y, const float* dy, float* out,
                        int64_t n, int64_t h) {
  parallel_for(n, n * h * 12, [&](int64_t r) { lstm_gradient_row(gates, c, y, dy, out, r, h); });
}

void gru_cell(int, const float* gi, const float* gh, const float* hx, float* out, int64_t n, int64_t h) {
  parallel_for(n, n * h * 8, [&](int64_t r) { gru_row(gi, gh, hx, out, r, h); });
}

void gru_cell_gradient(int, const float* gi, const float* gh, const float* hx, const float* dy, float* out,
                       int64_t n, int64_t h) {
  parallel_for(n, n * h * 12, [&](int64_t r) { gru_gradient_row(gi, gh, hx, dy, out, r, h); });
}

}  // namespace gpumat::host
