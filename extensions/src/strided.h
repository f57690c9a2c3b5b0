// Strided iteration, shared by the host and CUDA kernels of the strided family (host/strided.cpp,
// cuda/strided.cu): an N-d index space walked in row-major order, and for each operand an element
// stride per dim (0 repeats an element: broadcasting; negative walks backwards: flip), after
// PyTorch's TensorIterator and needle's strided NDArray. The ops (ops/strided.cpp) build an Iter,
// merge the dims that are contiguous for every operand (so a plain elementwise call walks one
// dim), and check that every address is inside its array before any kernel runs.
#pragma once

#include <cstdint>
#include <utility>

#include "host_device.h"

namespace gpumat::strided {

constexpr int kMaxDims = 8;      // the most dims an operand of a strided op may have
constexpr int kMaxOperands = 4;  // the output and up to three inputs (where: cond, a, b)

// The index space (size, ndim dims) and each operand's strides over it; operand 0 is the output.
// `narrow`: every index and offset fits in 32 bits (the ops set it when every array has fewer
// than 2**31 elements), so CUDA kernels may divide in 32 bits, several times faster than in 64.
struct Iter {
  int ndim;
  bool narrow;
  int64_t size[kMaxDims];
  int64_t stride[kMaxOperands][kMaxDims];
  // For a narrow Iter: each size's division by multiplication (set_divisors), as PyTorch's
  // IntDivider (Granlund and Montgomery, "Division by invariant integers using multiplication",
  // PLDI 1994): n / size = (umulhi(n, magic) + n) >> shift for n and size below 2**31.
  uint32_t magic[kMaxDims];
  uint32_t shift[kMaxDims];
};

// Fills it.magic and it.shift for its sizes (each in [1, 2**31)); the host computes them once.
inline void set_divisors(Iter& it) {
  for (int d = 0; d < it.ndim; ++d) {
    const uint64_t n = static_cast<uint64_t>(it.size[d]);
    uint32_t s = 0;
    while ((uint64_t{1} << s) < n) ++s;
    it.shift[d] = s;
    it.magic[d] = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - n)) / n + 1);
  }
}

// The offsets of element i of a narrow Iter in operands [0, Count), by multiplications: the
// quotient of i by each size from its magic number, the remainder from the quotient.
template <int Count>
GPUMAT_HD void offsets_narrow(const Iter& it, uint32_t i, int32_t* off) {
  for (int k = 0; k < Count; ++k) off[k] = 0;
  for (int d = it.ndim - 1; d >= 0; --d) {
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(i) * it.magic[d]) >> 32);
    const uint32_t q = (hi + i) >> it.shift[d];
    const int32_t c = static_cast<int32_t>(i - q * static_cast<uint32_t>(it.size[d]));
    i = q;
    for (int k = 0; k < Count; ++k) off[k] += c * static_cast<int32_t>(it.stride[k][d]);
  }
}

// The offsets of element i (row-major over it.size: the last dim fastest) in operands [0, count),
// computed in the index type I (int64_t, or int32_t for a narrow Iter).
template <int Count, typename I = int64_t>
GPUMAT_HD void offsets(const Iter& it, I i, I* off) {
  for (int k = 0; k < Count; ++k) off[k] = 0;
  for (int d = it.ndim - 1; d >= 0; --d) {
    const I n = static_cast<I>(it.size[d]);
    const I c = i % n;
    i /= n;
    for (int k = 0; k < Count; ++k) off[k] += c * static_cast<I>(it.stride[k][d]);
  }
}

// The elementwise functions of map_strided (gpumat.ops.broadcast_binary's `op` codes, in this
// order; gpumat/ops.py lists the same names). Each computes what the contiguous kernel of the same
// name computes (cuda/elementwise.cu): IEEE division, comparisons and logic as 1.0 / 0.0 (NaN
// compares false and is true as a truth value), minimum / maximum with NaN winning.
enum MapOp : int {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kMinimum,
  kMaximum,
  kLogicalAnd,
  kLogicalOr,
  kWhere,  // a where c != 0 else b (the ternary: c is the condition)
  kNumMapOps
};

GPUMAT_HD float apply(int op, float a, float b, float c) {
  switch (op) {
    case kAdd:
      return a + b;
    case kSub:
      return a - b;
    case kMul:
      return a * b;
    case kDiv:
      return a / b;
    case kEq:
      return a == b ? 1.0f : 0.0f;
    case kNe:
      return a != b ? 1.0f : 0.0f;
    case kLt:
      return a < b ? 1.0f : 0.0f;
    case kLe:
      return a <= b ? 1.0f : 0.0f;
    case kGt:
      return a > b ? 1.0f : 0.0f;
    case kGe:
      return a >= b ? 1.0f : 0.0f;
    case kMinimum:
      return a != a ? a : (b != b ? b : (a < b ? a : b));
    case kMaximum:
      return a != a ? a : (b != b ? b : (a > b ? a : b));
    case kLogicalAnd:
      return a != 0.0f && b != 0.0f ? 1.0f : 0.0f;
    case kLogicalOr:
      return a != 0.0f || b != 0.0f ? 1.0f : 0.0f;
    default:  // kWhere
      return c != 0.0f ? a : b;
  }
}

}  // namespace gpumat::strided
