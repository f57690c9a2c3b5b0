// Counter-based random numbers shared by the host and CUDA fills: element i of a fill depends only
// on (seed, i), so both devices produce identical arrays and a fill parallelises trivially.
// The mixer is SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014); normals use the Box-Muller transform.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace gpumat::rng {

GPUMAT_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the top 24 bits (exactly representable in float32).
GPUMAT_HD float uniform01(uint64_t seed, uint64_t counter) {
  uint64_t bits = splitmix64(seed ^ splitmix64(counter));
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

// Standard normal for element i: Box-Muller on two uniforms drawn from counters 2i and 2i+1.
// NOTE: u1 is taken in (0, 1] so log(u1) is finite.
GPUMAT_HD float standard_normal(uint64_t seed, uint64_t i) {
  float u1 = 1.0f - uniform01(seed, 2 * i);
  float u2 = uniform01(seed, 2 * i + 1);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

// An integer in [0, range) (range >= 1) from the 64 bits of (seed, counter): bits mod range, whose
// bias is below range / 2^64 (< 2^-38 for the ranges gpumat allows, at most 2^25).
GPUMAT_HD int64_t below(uint64_t seed, uint64_t counter, uint64_t range) {
  return static_cast<int64_t>(splitmix64(seed ^ splitmix64(counter)) % range);
}

}  // namespace gpumat::rng
