// Host random fills; element i is a function of (seed, i) only (see ../random.h), matching CUDA.
#include "../random.h"

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

void random_uniform(int, float* out, int64_t n, float low, float high, uint64_t seed) {
  const float scale = high - low;
  parallel_for(n, n, [&](int64_t i) {
    float v = low + scale * rng::uniform01(seed, static_cast<uint64_t>(i));
    out[i] = v < high ? v : low;  // NOTE: rounding can land on `high`; keep the interval half-open
  });
}

void random_normal(int, float* out, int64_t n, float mean, float stddev, uint64_t seed) {
  parallel_for(n, n, [&](int64_t i) {
    out[i] = mean + stddev * rng::standard_normal(seed, static_cast<uint64_t>(i));
  });
}

void random_integers(int, float* out, int64_t n, int64_t low, int64_t high, uint64_t seed) {
  const uint64_t range = static_cast<uint64_t>(high - low);
  parallel_for(n, n, [&](int64_t i) {
    out[i] = static_cast<float>(low + rng::below(seed, static_cast<uint64_t>(i), range));
  });
}

}  // namespace gpumat::host
