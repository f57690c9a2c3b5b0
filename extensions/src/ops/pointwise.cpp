// The pointwise ops (gpumat/ops.h): one definition per shape, for every GPUMAT_UNARY,
// GPUMAT_UNARY_GRADIENT, GPUMAT_BINARY, GPUMAT_TERNARY, GPUMAT_UNARY_BOUNDS(_GRADIENT) and
// GPUMAT_UNARY_SCALAR(_GRADIENT) line of
// ../kernels.def (tanh, sqrt, abs, lt, minimum, where, clamp, ...), so a new pointwise kernel needs
// no code here. Every array one shape on one device; out may be an input,
// or else share no memory with it. Kernels in ../cuda/<family>.cu and ../host/<family>.cpp.
#include "gpumat/ops.h"

#include "checks.h"

namespace gpumat::ops {

#define GPUMAT_KERNEL(name, params)
#define GPUMAT_UNARY(NAME, doc)                                                        \
  void NAME(const GpuMatrix& in, GpuMatrix& out) {                                     \
    const Backend& be = same_device(#NAME, in, out);                                   \
    same_shape(#NAME, in, out);                                                        \
    in_place_or_disjoint(#NAME, in, out);                                              \
    if (out.size() > 0) be.NAME(in.device().index, in.data(), out.data(), out.size()); \
    finish(out);                                                                       \
  }
#define GPUMAT_UNARY_GRADIENT(NAME, doc)                                                        \
  void NAME(const GpuMatrix& y, const GpuMatrix& dy, GpuMatrix& out) {                          \
    const Backend& be = same_device(#NAME, y, dy, out);                                         \
    same_shape(#NAME, y, dy);                                                                   \
    same_shape(#NAME, y, out);                                                                  \
    in_place_or_disjoint(#NAME, y, out);                                                        \
    in_place_or_disjoint(#NAME, dy, out);                                                       \
    if (out.size() > 0) be.NAME(y.device().index, y.data(), dy.data(), out.data(), out.size()); \
    finish(out);                                                                                \
  }
#define GPUMAT_BINARY(NAME, doc)                                                               \
  void NAME(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out) {                          \
    const Backend& be = same_device(#NAME, a, b, out);                                         \
    same_shape(#NAME, a, b);                                                                   \
    same_shape(#NAME, a, out);                                                                 \
    in_place_or_disjoint(#NAME, a, out);                                                       \
    in_place_or_disjoint(#NAME, b, out);                                                       \
    if (out.size() > 0) be.NAME(a.device().index, a.data(), b.data(), out.data(), out.size()); \
    finish(out);                                                                               \
  }
#define GPUMAT_TERNARY(NAME, doc)                                                            \
  void NAME(const GpuMatrix& cond, const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out) { \
    const Backend& be = same_device(#NAME, cond, a, b, out);                                 \
    same_shape(#NAME, cond, a);                                                              \
    same_shape(#NAME, cond, b);                                                              \
    same_shape(#NAME, cond, out);                                                            \
    in_place_or_disjoint(#NAME, cond, out);                                                  \
    in_place_or_disjoint(#NAME, a, out);                                                     \
    in_place_or_disjoint(#NAME, b, out);                                                     \
    if (out.size() > 0)                                                                      \
      be.NAME(cond.device().index, cond.data(), a.data(), b.data(), out.data(), out.size()); \
    finish(out);                                                                             \
  }
#define GPUMAT_UNARY_BOUNDS(NAME, doc)                                                         \
  void NAME(const GpuMatrix& in, float lo, float hi, GpuMatrix& out) {                         \
    const Backend& be = same_device(#NAME, in, out);                                           \
    same_shape(#NAME, in, out);                                                                \
    in_place_or_disjoint(#NAME, in, out);                                                      \
    if (out.size() > 0) be.NAME(in.device().index, in.data(), lo, hi, out.data(), out.size()); \
    finish(out);                                                                               \
  }
#define GPUMAT_UNARY_BOUNDS_GRADIENT(NAME, doc)                                                         \
  void NAME(const GpuMatrix& x, const GpuMatrix& dy, float lo, float hi, GpuMatrix& out) {              \
    const Backend& be = same_device(#NAME, x, dy, out);                                                 \
    same_shape(#NAME, x, dy);                                                                           \
    same_shape(#NAME, x, out);                                                                          \
    in_place_or_disjoint(#NAME, x, out);                                                                \
    in_place_or_disjoint(#NAME, dy, out);                                                               \
    if (out.size() > 0) be.NAME(x.device().index, x.data(), dy.data(), lo, hi, out.data(), out.size()); \
    finish(out);                                                                                        \
  }
#define GPUMAT_UNARY_SCALAR(NAME, doc)                                                    \
  void NAME(const GpuMatrix& in, float s, GpuMatrix& out) {                               \
    const Backend& be = same_device(#NAME, in, out);                                      \
    same_shape(#NAME, in, out);                                                           \
    in_place_or_disjoint(#NAME, in, out);                                                 \
    if (out.size() > 0) be.NAME(in.device().index, in.data(), s, out.data(), out.size()); \
    finish(out);                                                                          \
  }
#define GPUMAT_UNARY_SCALAR_GRADIENT(NAME, doc)                                                    \
  void NAME(const GpuMatrix& x, const GpuMatrix& dy, float s, GpuMatrix& out) {                    \
    const Backend& be = same_device(#NAME, x, dy, out);                                            \
    same_shape(#NAME, x, dy);                                                                      \
    same_shape(#NAME, x, out);                                                                     \
    in_place_or_disjoint(#NAME, x, out);                                                           \
    in_place_or_disjoint(#NAME, dy, out);                                                          \
    if (out.size() > 0) be.NAME(x.device().index, x.data(), dy.data(), s, out.data(), out.size()); \
    finish(out);                                                                                   \
  }
#include "../kernels.def"

}  // namespace gpumat::ops
