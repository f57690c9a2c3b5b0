// A vectorisable exp for the host kernels: plain arithmetic and selects, no library call,
// so that `#pragma omp simd` loops over it compile to SIMD code (glibc's expf is a call the
// compiler cannot vectorise without -ffast-math, which would also drop NaN semantics).
// Used where a kernel's exponentials are many (the host attention's scores, GELU through
// normal_cdf below): it is not glibc's expf, so those kernels agree with the CUDA kernels to
// float32 rounding, not bit for bit. The pointwise exp, tanh, sigmoid, SiLU and the tanh GELU use
// vexp_full, vtanh and vsigmoid below (libm's expf and tanhf per element ran 3-7x PyTorch's time on
// an AVX2 machine); the rarer pointwise functions (log, sin, erf, ...) keep the C library's.
//   vexp: Cody-Waite range reduction x = n ln2 + r (ln2 split in two parts, so n ln2 is exact)
//     and a degree-6 polynomial for e^r on |r| <= ln2 / 2, with the coefficients of expf in the
//     Cephes Mathematical Library (S. L. Moshier, 1984-1992), evaluated in Estrin's scheme: measured
//     within 8.8e-8 relative of e^x (every float in [-87, 87] against double exp). Below -87.3 (where the
//     result would be subnormal) it gives 0, above 88.7 inf; NaN gives NaN.
// Multiply-adds are explicit fused ones (fmaf: one rounding), the same bits on every build: an FMA
// instruction in the AVX2 and AVX-512 clones and on AArch64, a C library call in the baseline x86
// clone (CPUs before 2013 have no FMA; correct there, slower). GELU and its gradient on 2048x512
// took 20-25 % less than with separate multiplies and adds. The functions are always inlined: a
// clone calling one compiled for the baseline would call fmaf per element.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace gpumat::host {

[[gnu::always_inline]] inline float fmadd(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

[[gnu::always_inline]] inline float vexp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kMax = 88.7228391f, kMin = -87.3365479f;  // e^x overflows / turns subnormal
  // No clamp: outside [kMin, kMax] and for NaN the last line picks the result, and what is computed
  // meanwhile is never subnormal (the shift below leaves 2^n's mantissa 0; for -inf, n comes out
  // as INT_MIN and 2^n as 1), so it costs no microcode assist, as a clamp to kMin did (a causal
  // attention's masked scores ran 3x slower). A clamp's selects also kept GCC 12 from vectorising
  // the loops for AVX2 and AVX-512.
  const float xc = x;
  // n = round(xc log2 e), as a truncation corrected for negative values (no floor call)
  const float t = fmadd(xc, kLog2e, 0.5f);
  const float tr = static_cast<float>(static_cast<int32_t>(t)), below = tr - 1.0f;
  const float fn = tr > t ? below : tr;  // selects between values computed unconditionally: SIMD
  const float r = fmadd(-fn, kLn2Lo, fmadd(-fn, kLn2Hi, xc));
  // The polynomial in Estrin's scheme (pairs, then powers r^2, r^4): its dependency chain is half
  // Horner's, and a SIMD loop over vexp waits on that chain, not on the number of operations.
  const float r2 = r * r;
  const float p01 = fmadd(1.6666665459e-1f, r, 5.0000001201e-1f);
  const float p23 = fmadd(8.3334519073e-3f, r, 4.1665795894e-2f);
  const float p45 = fmadd(1.9875691500e-4f, r, 1.3981999507e-3f);
  const float p = fmadd(p45, r2 * r2, fmadd(p23, r2, p01));
  const float er = fmadd(p, r2, r) + 1.0f;
  // 2^n for n in [-126, 128] as 2^m * f: m = n except n = 128 (not a float exponent), m = 127, f = 2
  const bool top = fn > 127.0f;
  const float fm = fn - 1.0f;
  const uint32_t bits = (static_cast<uint32_t>(static_cast<int32_t>(top ? fm : fn)) + 127u) << 23;
  float pow2m;
  std::memcpy(&pow2m, &bits, sizeof pow2m);
  const float y = er * (top ? 2.0f : 1.0f) * pow2m;
  return x > kMax ? std::numeric_limits<float>::infinity() : (x < kMin ? 0.0f : (x != x ? x : y));
}

// The standard normal distribution function Phi(x) = erfc(-x / sqrt 2) / 2 (GELU's factor), in
// plain arithmetic and selects (SIMD with vexp). erfc(z), z >= 0, is Press et al.'s Chebyshev fit
// t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), fractional error below 1.2e-7 for every z (Numerical
// Recipes in C, 2nd ed., 1992, section 6.2, erfcc), so Phi keeps its relative accuracy in the
// lower tail, where 1 + erf(x / sqrt 2) cancels. Phi(NaN) is NaN; Phi(-inf) = 0, Phi(inf) = 1.
[[gnu::always_inline]] inline float normal_cdf(float x) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  const float z = (x < 0.0f ? -x : x) * kInvSqrt2;
  const float t = 1.0f / fmadd(0.5f, z, 1.0f);
  // P(t) of degree 9 in Estrin's scheme, as vexp's.
  const float t2 = t * t, t4 = t2 * t2;
  const float p01 = fmadd(1.00002368f, t, -1.26551223f);
  const float p23 = fmadd(0.09678418f, t, 0.37409196f);
  const float p45 = fmadd(0.27886807f, t, -0.18628806f);
  const float p67 = fmadd(1.48851587f, t, -1.13520398f);
  const float p89 = fmadd(0.17087277f, t, -0.82215223f);
  const float p = fmadd(p89, t4 * t4, fmadd(fmadd(p67, t2, p45), t4, fmadd(p23, t2, p01)));
  const float half_erfc = 0.5f * t * vexp(fmadd(-z, z, p));  // erfc(|x| / sqrt 2) / 2 = Phi(-|x|)
  return x < 0.0f ? half_erfc : (x != x ? x : 1.0f - half_erfc);
}

// e^x for every float x, subnormal results included (vexp gives 0 below -87.3): there the result
// is e^(x + 64 ln 2) 2^-64, the argument shifted into vexp's range and the product rounded once
// into the subnormals (absolute error below 1e-44). One vexp per element: the select is on the
// argument. For the pointwise exp and the sigmoid, whose outputs reach the subnormals.
[[gnu::always_inline]] inline float vexp_full(float x) {
  constexpr float kMin = -87.3365479f, kShift = 44.3614196f, kScale = 5.42101086e-20f;  // 64 ln 2, 2^-64
  const bool low = x < kMin;
  const float e = vexp(low ? x + kShift : x);
  return low ? e * kScale : e;
}

// The logistic sigmoid 1 / (1 + e^-x), from e = e^-|x| (never overflows): 1 / (1 + e) for x >= 0,
// e / (1 + e) below (PyTorch's and the CUDA kernels' stable form); NaN gives NaN.
[[gnu::always_inline]] inline float vsigmoid(float x) {
  const float e = vexp_full(x < 0.0f ? x : -x);
  return (x < 0.0f ? e : 1.0f) / (1.0f + e);
}

// tanh(x) after the Cephes Mathematical Library's tanhf (S. L. Moshier): for |x| < 0.625 the odd
// minimax polynomial x + x^3 P(x^2) (no cancellation near 0), above it 1 - 2 / (e^(2|x|) + 1) with
// x's sign (e^(2|x|) overflowing to inf gives 1 exactly); NaN gives NaN. Both computed, one
// selected (SIMD). Within 2e-7 relative of tanh over the floats tested (tests/kernels).
[[gnu::always_inline]] inline float vtanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  const float p = fmadd(fmadd(fmadd(fmadd(-5.70498872745e-3f, z, 2.06390887954e-2f), z, -5.37397155531e-2f),
                              z, 1.33314422036e-1f),
                        z, -3.33332819422e-1f);
  const float small = fmadd(p * z, x, x);
  const float big = 1.0f - 2.0f / (vexp(2.0f * ax) + 1.0f);
  return ax < 0.625f ? small : (x < 0.0f ? -big : (x != x ? x : big));
}

}  // namespace gpumat::host
