// The elementwise family's ops (gpumat/ops.h): fill, add, mul, div, eq, add_scalar, mul_scalar, axpy,
// copy, exp, log. Checks here and in checks.h; kernels in ../cuda/elementwise.cu,
// ../host/elementwise.cpp.
#include "gpumat/ops.h"

#include "checks.h"

namespace gpumat::ops {

void fill(GpuMatrix& arr, float value) {
  const Backend& be = same_device("fill", arr);
  if (arr.size() > 0) be.array_set(arr.device().index, arr.data(), arr.size(), value);
  finish(arr);
}

// NAME: the op (ops.h), KERNEL: its backend kernel (kernels.def).
#define GPUMAT_BINARY_OP(NAME, KERNEL)                                                           \
  void NAME(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out) {                            \
    const Backend& be = same_device(#NAME, a, b, out);                                           \
    same_shape(#NAME, a, b);                                                                     \
    same_shape(#NAME, a, out);                                                                   \
    in_place_or_disjoint(#NAME, a, out);                                                         \
    in_place_or_disjoint(#NAME, b, out);                                                         \
    if (out.size() > 0) be.KERNEL(a.device().index, a.data(), b.data(), out.data(), out.size()); \
    finish(out);                                                                                 \
  }
GPUMAT_BINARY_OP(add, add)
GPUMAT_BINARY_OP(mul, multiply)
GPUMAT_BINARY_OP(div, divide)
GPUMAT_BINARY_OP(eq, eq)
#undef GPUMAT_BINARY_OP

#define GPUMAT_CONST_OP(NAME, KERNEL)                                                           \
  void NAME(const GpuMatrix& in, float value, GpuMatrix& out) {                                 \
    const Backend& be = same_device(#NAME, in, out);                                            \
    same_shape(#NAME, in, out);                                                                 \
    in_place_or_disjoint(#NAME, in, out);                                                       \
    if (out.size() > 0) be.KERNEL(in.device().index, in.data(), value, out.data(), out.size()); \
    finish(out);                                                                                \
  }
GPUMAT_CONST_OP(add_scalar, add_const)
GPUMAT_CONST_OP(mul_scalar, multiply_const)
#undef GPUMAT_CONST_OP

void axpy(float alpha, const GpuMatrix& x, GpuMatrix& y) {
  const Backend& be = same_device("axpy", x, y);
  same_shape("axpy", x, y);
  in_place_or_disjoint("axpy", x, y);
  if (y.size() > 0) be.axpy(y.device().index, alpha, x.data(), y.data(), y.size());
  finish(y);
}

#define GPUMAT_UNARY_OP(NAME)                                                          \
  void NAME(const GpuMatrix& in, GpuMatrix& out) {                                     \
    const Backend& be = same_device(#NAME, in, out);                                   \
    same_shape(#NAME, in, out);                                                        \
    if (out.size() > 0) be.NAME(in.device().index, in.data(), out.data(), out.size()); \
    finish(out);                                                                       \
  }
GPUMAT_UNARY_OP(exp)
GPUMAT_UNARY_OP(log)
#undef GPUMAT_UNARY_OP

void copy(const GpuMatrix& src, GpuMatrix& dst) {
  const Backend& be = same_device("copy", src, dst);
  same_shape("copy", src, dst);
  in_place_or_disjoint("copy", src, dst);
  if (dst.size() > 0 && src.data() != dst.data())
    be.copy(dst.device().index, src.data(), dst.data(), dst.size());
  finish(dst);
}

}  // namespace gpumat::ops
