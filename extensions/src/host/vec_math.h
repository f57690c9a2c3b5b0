// Vectorisable exp and erf for the host kernels: plain arithmetic and selects, no library calls,
// so that `#pragma omp simd` loops over them compile to SIMD code (glibc's expf and erff are calls
// the compiler cannot vectorise without -ffast-math, which would also drop NaN semantics).
//   vexp: Cody-Waite range reduction x = n ln2 + r (ln2 split in two parts, so n ln2 is exact)
//     and a degree-6 polynomial for e^r on |r| <= ln2 / 2, with the coefficients of expf in the
//     Cephes Mathematical Library (S. L. Moshier, 1984-1992): within about 2 ulp of e^x. Below
//     -87.3 (where the result would be subnormal) it gives 0, above 88.7 inf; NaN gives NaN.
//   verf: Abramowitz & Stegun, Handbook of Mathematical Functions (1964), formula 7.1.26:
//     erf(x) = 1 - (a1 t + ... + a5 t^5) e^(-x^2), t = 1 / (1 + p x), for x >= 0 (odd in x):
//     absolute error at most 1.5e-7 in exact arithmetic; in float, with the rounding of the sum
//     that cancels near x = 0, at most 4.7e-7 (measured against double erf over [-10, 10]). GELU
//     uses it as 1 + erf, where an absolute error is what float's own spacing near 1 gives.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace gpumat::host {

inline float vexp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kMax = 88.7228391f, kMin = -87.3365479f;   // e^x overflows / turns subnormal
  const float xc = x > kMax ? kMax : (x < kMin ? kMin : x);  // NaN passes through both
  // n = round(xc log2 e), as a truncation corrected for negative values (no floor call)
  const float t = xc * kLog2e + 0.5f;
  const float tr = static_cast<float>(static_cast<int32_t>(t)), below = tr - 1.0f;
  const float fn = tr > t ? below : tr;  // selects between values computed unconditionally: SIMD
  const float r = (xc - fn * kLn2Hi) - fn * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  // 2^n for n in [-126, 128] as 2^m * f: m = n except n = 128 (not a float exponent), m = 127, f = 2
  const bool top = fn > 127.0f;
  const float fm = fn - 1.0f;
  const int32_t bits = (static_cast<int32_t>(top ? fm : fn) + 127) << 23;
  float pow2m;
  std::memcpy(&pow2m, &bits, sizeof pow2m);
  const float y = er * (top ? 2.0f : 1.0f) * pow2m;
  return x > kMax ? std::numeric_limits<float>::infinity() : (x < kMin ? 0.0f : (x != x ? x : y));
}

inline float verf(float x) {
  constexpr float kP = 0.3275911f;
  constexpr float kA1 = 0.254829592f, kA2 = -0.284496736f, kA3 = 1.421413741f, kA4 = -1.453152027f,
                  kA5 = 1.061405429f;
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + kP * a);
  const float poly = ((((kA5 * t + kA4) * t + kA3) * t + kA2) * t + kA1) * t;
  const float y = 1.0f - poly * vexp(-a * a);
  return x < 0.0f ? -y : (x != x ? x : y);
}

}  // namespace gpumat::host
