// The strided family's ops (gpumat/ops.h): broadcast_binary, broadcast_where, sum_to, as_strided,
// as_strided_scatter. Each builds a strided::Iter from the shapes (and, for the as_strided ops, the
// caller's strides), checks that every address lies inside its array, merges the dims that are
// contiguous for every operand, then calls the device's kernel. Kernels in ../cuda/strided.cu and
// ../host/strided.cpp.
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "../strided.h"
#include "checks.h"
#include "gpumat/ops.h"

namespace gpumat::ops {

static_assert(kMaxStridedDims == strided::kMaxDims, "ops.h and strided.h must agree on the most dims");

namespace {

using Shape = std::vector<int64_t>;

std::string shape_text(const Shape& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

void require_rank(const char* op, const char* what, const Shape& s) {
  if (static_cast<int>(s.size()) > strided::kMaxDims)
    throw ShapeError(std::string(op) + ": " + what + " has " + std::to_string(s.size()) + " dims " +
                     shape_text(s) + "; strided ops take at most " + std::to_string(strided::kMaxDims));
}

// Row-major element strides of a contiguous array of shape s.
Shape contiguous_strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

// The strides over `target` (ndim dims) of a contiguous operand of shape s broadcast to it
// (right-aligned; a dim of 1 or a missing one repeats: stride 0). Throws when it does not broadcast.
Shape broadcast_strides(const Shape& s, const Shape& target) {
  const Shape own = contiguous_strides(s);
  Shape st(target.size(), 0);
  const size_t lead = target.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d) st[lead + d] = (s[d] == target[lead + d]) ? own[d] : 0;
  return st;
}

// numpy's broadcast shape of shapes; empty optional on a mismatch.
bool broadcast_shape(const std::vector<const Shape*>& shapes, Shape& out) {
  size_t nd = 0;
  for (auto* s : shapes) nd = std::max(nd, s->size());
  out.assign(nd, 1);
  for (auto* s : shapes) {
    const size_t lead = nd - s->size();
    for (size_t d = 0; d < s->size(); ++d) {
      const int64_t v = (*s)[d];
      int64_t& o = out[lead + d];
      if (v == o || v == 1) continue;
      if (o != 1) return false;
      o = v;
    }
  }
  return true;
}

// An Iter over `size` with each operand's strides, dims of length 1 dropped and neighbours that
// are contiguous for every operand merged (TensorIterator's coalescing): the kernels then divide
// once per remaining dim.
strided::Iter make_iter(const Shape& size, const std::vector<Shape>& strides) {
  strided::Iter it{};
  const int count = static_cast<int>(strides.size());
  int nd = 0;
  // From the innermost dim outwards: merge dim d into the current innermost merged dim when, for
  // every operand, stepping d equals stepping the merged dim through its whole length.
  int64_t msize[strided::kMaxDims];
  int64_t mstride[strided::kMaxOperands][strided::kMaxDims];
  for (int d = static_cast<int>(size.size()) - 1; d >= 0; --d) {
    if (size[d] == 1) continue;
    if (nd > 0) {
      bool merge = true;
      for (int k = 0; k < count && merge; ++k) merge = strides[k][d] == mstride[k][nd - 1] * msize[nd - 1];
      if (merge) {
        msize[nd - 1] *= size[d];
        continue;
      }
    }
    msize[nd] = size[d];
    for (int k = 0; k < count; ++k) mstride[k][nd] = strides[k][d];
    ++nd;
  }
  it.ndim = nd;
  for (int d = 0; d < nd; ++d) {  // back to outermost-first
    it.size[d] = msize[nd - 1 - d];
    for (int k = 0; k < count; ++k) it.stride[k][d] = mstride[k][nd - 1 - d];
  }
  return it;
}

// Whether arrays of these element counts keep every index and offset in 32 bits (Iter::narrow).
bool narrow(std::initializer_list<int64_t> sizes) {
  for (int64_t n : sizes)
    if (n >= (int64_t{1} << 31) - 1) return false;
  return true;
}

// Marks `it` narrow (32-bit index arithmetic) and gives it its divisors' magic numbers.
void set_narrow(strided::Iter& it, bool is_narrow) {
  it.narrow = is_narrow;
  if (is_narrow) strided::set_divisors(it);
}

int64_t count_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

// Checks that offset + sum_d idx_d * stride[d] stays inside [0, limit) for every idx of `size`
// (nonempty), without overflow: each term is bounded by the array's size first.
void check_region(const char* op, const char* what, const Shape& size, const Strides& stride, int64_t offset,
                  int64_t limit, const std::string& desc) {
  int64_t lo = offset, hi = offset;
  for (size_t d = 0; d < size.size(); ++d) {
    const int64_t s = stride.v[d];
    if (size[d] > 1 && (std::llabs(s) > limit || (s != 0 && size[d] - 1 > limit / std::llabs(s))))
      throw ShapeError(std::string(op) + ": stride " + std::to_string(s) + " of dim " + std::to_string(d) +
                       " reaches outside " + what + " " + desc);
    const int64_t span = (size[d] - 1) * s;
    (span < 0 ? lo : hi) += span;
  }
  if (offset < 0 || offset >= limit || lo < 0 || hi >= limit)
    throw ShapeError(std::string(op) + ": the strided region (offset " + std::to_string(offset) +
                     ") reaches elements " + std::to_string(lo) + ".." + std::to_string(hi) + " outside " +
                     what + " " + desc);
}

std::string strides_text(const Strides& st, size_t nd) {
  Shape v(st.v, st.v + nd);
  return shape_text(v);
}

}  // namespace

void broadcast_binary(const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out, int64_t op_code) {
  const char* op = "broadcast_binary";
  const Backend& be = same_device(op, a, b, out);
  if (op_code < 0 || op_code >= strided::kWhere)
    throw ShapeError(std::string(op) + ": op code " + std::to_string(op_code) + " is not in [0, " +
                     std::to_string(strided::kWhere) + ")");
  require_rank(op, "a", a.shape());
  require_rank(op, "b", b.shape());
  Shape target;
  const bool ok = broadcast_shape({&a.shape(), &b.shape()}, target);
  if (!ok || target != out.shape())
    throw ShapeError(std::string(op) + ": shapes " + a.shape_str() + " and " + b.shape_str() +
                     (ok ? " broadcast to " + shape_text(target) : " cannot be broadcast together") +
                     ", output " + out.shape_str());
  for (const GpuMatrix* in : {&a, &b}) {
    if (in->shape() == out.shape())
      in_place_or_disjoint(op, *in, out);
    else
      not_aliased(op, *in, out);
  }
  const int64_t n = out.size();
  if (n > 0) {
    strided::Iter it = make_iter(target, {contiguous_strides(target), broadcast_strides(a.shape(), target),
                                          broadcast_strides(b.shape(), target)});
    set_narrow(it, narrow({a.size(), b.size(), n}));
    be.map_strided(out.device().index, static_cast<int>(op_code), a.data(), b.data(), nullptr, out.data(), it,
                   n);
  }
  finish(out);
}

void broadcast_where(const GpuMatrix& cond, const GpuMatrix& a, const GpuMatrix& b, GpuMatrix& out) {
  const char* op = "broadcast_where";
  const Backend& be = same_device(op, cond, a, b, out);
  for (const GpuMatrix* in : {&cond, &a, &b}) require_rank(op, "an input", in->shape());
  Shape target;
  const bool ok = broadcast_shape({&cond.shape(), &a.shape(), &b.shape()}, target);
  if (!ok || target != out.shape())
    throw ShapeError(std::string(op) + ": shapes " + cond.shape_str() + ", " + a.shape_str() + " and " +
                     b.shape_str() +
                     (ok ? " broadcast to " + shape_text(target) : " cannot be broadcast together") +
                     ", output " + out.shape_str());
  for (const GpuMatrix* in : {&cond, &a, &b}) {
    if (in->shape() == out.shape())
      in_place_or_disjoint(op, *in, out);
    else
      not_aliased(op, *in, out);
  }
  const int64_t n = out.size();
  if (n > 0) {
    strided::Iter it =
        make_iter(target, {contiguous_strides(target), broadcast_strides(a.shape(), target),
                           broadcast_strides(b.shape(), target), broadcast_strides(cond.shape(), target)});
    set_narrow(it, narrow({cond.size(), a.size(), b.size(), n}));
    be.map_strided(out.device().index, strided::kWhere, a.data(), b.data(), cond.data(), out.data(), it, n);
  }
  finish(out);
}

void sum_to(const GpuMatrix& in, GpuMatrix& out) {
  const char* op = "sum_to";
  const Backend& be = same_device(op, in, out);
  require_rank(op, "the input", in.shape());
  const Shape& s = in.shape();
  const Shape& t = out.shape();
  bool fits = t.size() <= s.size();
  const size_t lead = fits ? s.size() - t.size() : 0;
  for (size_t d = 0; d < t.size() && fits; ++d) fits = t[d] == s[lead + d] || t[d] == 1;
  if (!fits)
    throw ShapeError(std::string(op) + ": cannot sum " + in.shape_str() + " to " + out.shape_str() +
                     " (each output dim must equal the input's, right-aligned, or be 1)");
  not_aliased(op, in, out);
  const int64_t n_out = out.size();
  if (n_out == 0) return finish(out);
  // The kept dims (outer: one output element each) and the summed ones (inner), over in's dims.
  const Shape in_st = contiguous_strides(s);
  const Shape out_st = broadcast_strides(t, s);  // 0 on the summed dims
  Shape outer_size(s.size(), 1), inner_size(s.size(), 1), zeros(s.size(), 0);
  for (size_t d = 0; d < s.size(); ++d) {
    const bool kept = d >= lead && t[d - lead] == s[d];
    (kept ? outer_size : inner_size)[d] = s[d];
  }
  const int64_t n_inner = count_of(inner_size);
  const int dev = out.device().index;
  if (n_inner == 0) {
    be.array_set(dev, out.data(), n_out, 0.0f);
  } else if (n_inner == 1) {  // nothing summed (a gradient reaching an operand of its own shape):
    be.copy(dev, in.data(), out.data(), n_out);  // both contiguous, the same elements in order
  } else {
    strided::Iter outer = make_iter(outer_size, {out_st, in_st});
    strided::Iter inner = make_iter(inner_size, {zeros, in_st});
    set_narrow(outer, narrow({in.size()}));
    set_narrow(inner, narrow({in.size()}));
    be.sum_strided(dev, in.data(), out.data(), outer, inner, n_out, n_inner);
  }
  finish(out);
}

void as_strided(const GpuMatrix& in, GpuMatrix& out, Strides stride, int64_t offset) {
  const char* op = "as_strided";
  const Backend& be = same_device(op, in, out);
  require_rank(op, "the output", out.shape());
  not_aliased(op, in, out);
  const int64_t n = out.size();
  if (n > 0) {
    const std::string desc = in.shape_str() + " (" + std::to_string(in.size()) + " elements) for output " +
                             out.shape_str() + " with strides " + strides_text(stride, out.shape().size());
    check_region(op, "the input", out.shape(), stride, offset, in.size(), desc);
    Shape st(stride.v, stride.v + out.shape().size());
    strided::Iter it = make_iter(out.shape(), {contiguous_strides(out.shape()), st});
    set_narrow(it, narrow({in.size(), n}));
    be.copy_strided(out.device().index, in.data() + offset, out.data(), it, n);
  }
  finish(out);
}

void as_strided_scatter(const GpuMatrix& src, GpuMatrix& out, Strides stride, int64_t offset) {
  const char* op = "as_strided_scatter";
  const Backend& be = same_device(op, src, out);
  require_rank(op, "the source", src.shape());
  not_aliased(op, src, out);
  const int64_t n = src.size();
  if (n > 0) {
    const Shape& size = src.shape();
    const size_t nd = size.size();
    const std::string desc = out.shape_str() + " (" + std::to_string(out.size()) + " elements) for source " +
                             src.shape_str() + " with strides " + strides_text(stride, nd);
    check_region(op, "the output", size, stride, offset, out.size(), desc);
    // Distinct addresses: with the dims sorted by |stride|, each stride must step over everything
    // the smaller ones reach (a stride 0, or strides that interleave, would write an element twice).
    std::vector<size_t> dims;
    for (size_t d = 0; d < nd; ++d)
      if (size[d] > 1) dims.push_back(d);
    std::sort(dims.begin(), dims.end(),
              [&](size_t x, size_t y) { return std::llabs(stride.v[x]) < std::llabs(stride.v[y]); });
    int64_t reach = 0;  // the largest distance between two addresses of the smaller dims
    for (size_t d : dims) {
      const int64_t s = std::llabs(stride.v[d]);
      if (s <= reach)
        throw ShapeError(std::string(op) +
                         ": the region writes some elements of the output more than once: " + desc);
      reach += s * (size[d] - 1);
    }
    Shape st(stride.v, stride.v + nd);
    strided::Iter it = make_iter(size, {st, contiguous_strides(size)});
    set_narrow(it, narrow({out.size(), n}));
    be.copy_strided(out.device().index, src.data(), out.data() + offset, it, n);
  }
  finish(out);
}

}  // namespace gpumat::ops
