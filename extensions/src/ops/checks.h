// The argument checks every op family shares (src/ops/<family>.cpp), and the op counting. Each
// check throws ShapeError naming the op and the shapes; family-specific checks (a conv's geometry,
// a loss's scalar output, Adam's hyper-parameters) live in their family's file.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../backend.h"
#include "gpumat/error.h"
#include "gpumat/gpu_matrix.h"

namespace gpumat::ops {

// ---------------------------------------------------------------------------- devices, shapes, aliasing

// Checks that every array lives on the first one's device; returns that device's backend.
template <typename... Arrays>
const Backend& same_device(const char* op, const GpuMatrix& first, const Arrays&... rest) {
  auto check = [&](const GpuMatrix& m) {
    if (m.device() != first.device())
      throw ShapeError(std::string(op) + ": arrays are on different devices (" + first.device().str() +
                       " and " + m.device().str() + "); copy explicitly with copyfrom");
  };
  (check(rest), ...);
  (void)check;  // unused when there is only one array
  return backend_for(first.device());
}

// a and b have one shape.
void same_shape(const char* op, const GpuMatrix& a, const GpuMatrix& b);

// Whether a and b share memory: their element ranges intersect (an empty array shares none). Two
// arrays can overlap without being equal: views from DLPack imports of overlapping slices.
bool overlaps(const GpuMatrix& a, const GpuMatrix& b);

// `out` shares no memory with `in` (ops that cannot work in place: any overlap is refused).
void not_aliased(const char* op, const GpuMatrix& in, const GpuMatrix& out);

// `out` is exactly `in` (in place) or shares no memory with it: elementwise ops may work in place,
// but an output shifted against its input would read elements another thread already wrote.
void in_place_or_disjoint(const char* op, const GpuMatrix& in, const GpuMatrix& out);

// m has `ndim` dimensions; `what` names it in the message ("the input").
void require_ndim(const char* op, const char* what, const GpuMatrix& m, int64_t ndim);

// Every op ends with finish(out) once its kernels are queued: counts the call on the device
// (op_count) and, with GPUMAT_SYNC=1, synchronizes so an asynchronous fault names this op.
void finish(const GpuMatrix& m);

// ---------------------------------------------------------------------------- shapes as lists

// Drops leading 1s: (1, 1, 10) -> (10,).
std::vector<int64_t> strip_leading_ones(const std::vector<int64_t>& s);

// True when `suffix` ends `of`.
bool is_suffix(const std::vector<int64_t>& suffix, const std::vector<int64_t>& of);

// "(2, 3)", as GpuMatrix::shape_str.
std::string dims_str(std::vector<int64_t> v);

// ---------------------------------------------------------------------------- axis ops

// An array seen as (outer, n, inner) around one axis of length n.
struct AxisView {
  int64_t outer, n, inner;
};

// The (outer, n, inner) view of m around `axis` (negative counts from the end).
AxisView axis_view(const char* op, const GpuMatrix& m, int64_t axis, int64_t* normalized = nullptr);

// Checks that `r` is `full` reduced along axis a: the axis removed or kept with length 1.
void reduced_shape(const char* op, const char* what, const GpuMatrix& full, int64_t a, const GpuMatrix& r);

// ---------------------------------------------------------------------------- sliding windows (conv, pool)

// (in + 2 pad - k) / stride + 1, or 0 when the padded input is shorter than the kernel (C++
// division truncates toward zero, so the negative case is handled apart).
int64_t pooled_size(int64_t in, int64_t k, int64_t stride, int64_t pad);

// Strides, paddings and window sizes above 2^31 - 1 are refused on every device: the CUDA kernels
// keep them in int32 when the indices fit (conv.cu's fits_int32), and `in + 2 * pad` must not
// overflow int64 anywhere. No real geometry comes near: the padded input would hold > 2^32 elements
// per row.
constexpr int64_t kMaxWindowParam = std::numeric_limits<int32_t>::max();

// lowest <= v <= kMaxWindowParam; `what` names the parameter ("stride").
void check_window_param(const std::string& op, const char* what, int64_t v, int64_t lowest);

// ---------------------------------------------------------------------------- tensor lists

// One list of a multi-tensor optimizer step: its arrays (one per parameter) and whether the step
// writes them.
struct TensorList {
  const char* name;    // one array, in messages: "parameter"
  const char* plural;  // "parameters"
  std::vector<const GpuMatrix*> arrays;
  bool written;
};

template <typename Array>
TensorList tensor_list(const char* name, const char* plural, const std::vector<Array*>& arrays,
                       bool written) {
  return {name, plural, std::vector<const GpuMatrix*>(arrays.begin(), arrays.end()), written};
}

// Checks the lists of a multi-tensor step (lists[0] the parameters): one length (at most 2^31 - 1),
// no null array, every array on the first parameter's device, each tensor's arrays of one shape,
// and no written array overlapping any other array (written twice, or written while another
// tensor reads it, the result would depend on the kernel's order); read-only arrays may share
// memory. Returns the tensors' sizes (empty when there are no tensors); throws ShapeError.
std::vector<int64_t> check_tensor_lists(const char* op, const std::vector<TensorList>& lists);

// The data pointers of a list of arrays, in order.
template <typename Array>
std::vector<float*> data_of(const std::vector<Array*>& arrays) {
  std::vector<float*> out(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) out[i] = const_cast<float*>(arrays[i]->data());
  return out;
}

}  // namespace gpumat::ops
