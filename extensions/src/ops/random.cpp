// The random family's ops (gpumat/ops.h): uniform, normal, randint. Checks here and in
// checks.h; kernels in ../cuda/random.cu and ../host/random.cpp.
#include "gpumat/ops.h"

#include <cmath>
#include <string>

#include "checks.h"

namespace gpumat::ops {

void uniform(GpuMatrix& out, float low, float high, uint64_t seed) {
  const Backend& be = same_device("uniform", out);
  if (!std::isfinite(low) || !std::isfinite(high))
    throw ShapeError("uniform: low and high must be finite, got [" + std::to_string(low) + ", " +
                     std::to_string(high) + ")");
  if (!(low <= high))
    throw ShapeError("uniform: low must not exceed high, got [" + std::to_string(low) + ", " +
                     std::to_string(high) + ")");
  if (out.size() > 0) be.random_uniform(out.device().index, out.data(), out.size(), low, high, seed);
  finish(out);
}

void normal(GpuMatrix& out, float mean, float stddev, uint64_t seed) {
  const Backend& be = same_device("normal", out);
  if (!std::isfinite(mean) || !std::isfinite(stddev))
    throw ShapeError("normal: mean and stddev must be finite, got " + std::to_string(mean) + " and " +
                     std::to_string(stddev));
  if (!(stddev >= 0.0f)) throw ShapeError("normal: stddev must be >= 0, got " + std::to_string(stddev));
  if (out.size() > 0) be.random_normal(out.device().index, out.data(), out.size(), mean, stddev, seed);
  finish(out);
}

// randint's values are exact integers in float32 storage: both bounds within 2^24 in magnitude.
constexpr int64_t kMaxExactInt = int64_t{1} << 24;

void randint(GpuMatrix& out, int64_t low, int64_t high, uint64_t seed) {
  const Backend& be = same_device("randint", out);
  if (!(low < high))
    throw ShapeError("randint: low must be below high, got [" + std::to_string(low) + ", " +
                     std::to_string(high) + ")");
  if (low < -kMaxExactInt || high - 1 > kMaxExactInt)
    throw ShapeError("randint: the range [" + std::to_string(low) + ", " + std::to_string(high) +
                     ") goes past 2^24 in magnitude, where float32 storage holds integers exactly");
  if (out.size() > 0) be.random_integers(out.device().index, out.data(), out.size(), low, high, seed);
  finish(out);
}

}  // namespace gpumat::ops
