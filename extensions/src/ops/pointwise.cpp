// The pointwise ops (gpumat/ops.h): one definition per shape, for every GPUMAT_UNARY and
// GPUMAT_UNARY_GRADIENT line of ../kernels.def (tanh, sigmoid, sqrt and their gradients), so a new
// pointwise kernel needs no code here. Every array one shape on one device; out may be an input,
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
#include "../kernels.def"

}  // namespace gpumat::ops
