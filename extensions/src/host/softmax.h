// The softmax family's row statistics, shared by softmax.cpp and loss.cpp (the cross-entropy of a
// softmax). Internal linkage: each file that includes this compiles its own copy.
// Exponentials are vec_math.h's vexp, in float (within 8.8e-8 relative of e^x: the CUDA kernels'
// expf to float32 rounding; glibc's double exp per element took 10 ns an element), summed in
// double in lane_sum.h's fixed lanes, so a row's statistics are the same bits on every SIMD clone. The
// callers' row loops are GPUMAT_SIMD_CLONES functions that these helpers inline into (in the baseline x86
// build vexp's fused multiply-adds are library calls).
#pragma once

#include <cmath>
#include <cstdint>

#include "lane_sum.h"
#include "vec_math.h"

namespace gpumat::host {

namespace {
constexpr int64_t kExpChunk = 256;  // exponentials a chunk (a multiple of kLanes), on the stack

// exp(x - m) of floats x and m: the difference rounded to float, s, times 1 + its rounding error
// (Knuth's TwoSum gives the error exactly), so that a large difference's rounding (|x - m| near 100
// rounds by up to 4e-6 relative) does not enter the result: softmax rows of logits spread over
// +-100 came within 2e-7 relative of float64 (4e-6 without it). Infinite or NaN s: no correction
// (e^-inf = 0, NaN stays NaN).
[[gnu::always_inline]] inline float vexp_diff(float x, float m) {
  const float s = x - m;
  const float back = s - x;
  const float err = (x - (s - back)) + (-m - back);
  const float e = vexp(s);
  return fmadd(e, s - s == 0.0f ? err : 0.0f, e);
}

// use(j0, m, e) for consecutive chunks [j0, j0 + m) of [0, n), with e[j] = exp(arg(j0 + j) -
// shift): the exponentials in a loop of their own, which vectorizes (GCC 12 left a loop that also
// converted them to double, or divided, as scalar code: 10 ns an element).
template <typename Arg, typename Use>
[[gnu::always_inline]] inline void exp_chunks(int64_t n, const Arg& arg, float shift, const Use& use) {
  float e[kExpChunk];
  for (int64_t j0 = 0; j0 < n; j0 += kExpChunk) {
    const int64_t m = n - j0 < kExpChunk ? n - j0 : kExpChunk;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) e[j] = vexp_diff(arg(j0 + j), shift);
    use(j0, m, static_cast<const float*>(e));
  }
}

// The max of x[j * stride] over j in [0, n) (a NaN wins) and the sum of exp(x - max), in lanes.
[[gnu::always_inline]] inline void row_stats(const float* x, int64_t n, int64_t stride, float* max_out,
                                             double* sum_out) {
  // the max: a NaN wins; a long row in 16 lanes of selects (a vector loop, where one running max
  // is a compare and a branch an element), each lane starting from x[0]
  const auto keep = [](float v, float m) { return (v > m || v != v) ? v : m; };
  constexpr int64_t kMaxLanes = 16;
  float mx = x[0];
  if (n < 2 * kMaxLanes) {
    for (int64_t j = 1; j < n; ++j) mx = keep(x[j * stride], mx);
  } else {
    float lane_max[kMaxLanes];
    for (int64_t k = 0; k < kMaxLanes; ++k) lane_max[k] = mx;
    int64_t i = 0;
    for (; i + kMaxLanes <= n; i += kMaxLanes) {
#pragma omp simd
      for (int64_t k = 0; k < kMaxLanes; ++k) lane_max[k] = keep(x[(i + k) * stride], lane_max[k]);
    }
    for (int64_t k = 0; i + k < n; ++k) lane_max[k] = keep(x[(i + k) * stride], lane_max[k]);
    for (int64_t k = 0; k < kMaxLanes; ++k) mx = keep(lane_max[k], mx);
  }
  double lane[kLanes] = {};
  exp_chunks(
      n, [&](int64_t j) { return x[j * stride]; }, mx,
      [&](int64_t, int64_t m, const float* e) {
        lane_add(lane, m, [&](int64_t j) { return static_cast<double>(e[j]); });
      });
  *max_out = mx;
  *sum_out = lane_total(lane);
}
}  // namespace

}  // namespace gpumat::host
