// Sums in fixed double lanes for the host kernels' SIMD loops (layer norm, the softmax family):
// term(j) goes to lane j % kLanes in order, and the lanes are added in a fixed tree, so a sum is the
// same bits on every SIMD clone (GPUMAT_SIMD_CLONES) and thread count while its loop vectorizes
// (one running sum would be a chain of dependent additions). Always inlined: a clone calling a
// helper compiled for the baseline would run the baseline's code.
#pragma once

#include <cstdint>

namespace gpumat::host {

constexpr int64_t kLanes = 8;

// Adds term(j) for j in [0, d) to lane[j % kLanes] in order (d a multiple of kLanes keeps the next
// call's terms in the lanes they would have had in one call).
template <typename Term>
[[gnu::always_inline]] inline void lane_add(double* lane, int64_t d, const Term& term) {
  int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
#pragma omp simd
    for (int64_t k = 0; k < kLanes; ++k) lane[k] += term(j + k);
  }
  for (int64_t k = 0; j + k < d; ++k) lane[k] += term(j + k);
}

// The lanes' total: ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
[[gnu::always_inline]] inline double lane_total(const double* lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// The sum of term(j) for j in [0, d): lane_add into zeroed lanes, then lane_total.
template <typename Term>
[[gnu::always_inline]] inline double lane_sum(int64_t d, const Term& term) {
  double lane[kLanes] = {};
  lane_add(lane, d, term);
  return lane_total(lane);
}

}  // namespace gpumat::host
