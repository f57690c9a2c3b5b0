// The softmax family's row statistics, shared by softmax.cpp and loss.cpp (the cross-entropy of a
// softmax). Internal linkage: each file that includes this compiles its own copy.
#pragma once

#include <cmath>
#include <cstdint>

namespace gpumat::host {

namespace {
// Returns the row max and sum_c exp(x - max) of one row.
inline void row_stats(const float* x, int64_t cols, float* max_out, double* sum_out) {
  float mx = x[0];
  for (int64_t c = 1; c < cols; ++c) mx = (x[c] > mx || x[c] != x[c]) ? x[c] : mx;  // NaN wins
  double sum = 0.0;
  for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(x[c]) - mx);
  *max_out = mx;
  *sum_out = sum;
}
}  // namespace

}  // namespace gpumat::host
