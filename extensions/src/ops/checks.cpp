// The shared argument checks (checks.h) and the op counters (op_count, count_ops in gpumat/ops.h).
#include "checks.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpumat/ops.h"

namespace gpumat::ops {

namespace {

// GPUMAT_SYNC=1 synchronizes after every op, so an asynchronous fault is reported by the op that
// caused it rather than by a later one.
bool sync_after_each_op() {
  static const bool on = [] {
    const char* v = std::getenv("GPUMAT_SYNC");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

// Per-device op counters (op_count): kinds Host, Cuda, Emu; ordinals beyond the table share the
// last slot rather than index out of it.
constexpr int kCountedOrdinals = 64;
std::atomic<int64_t> g_op_counts[3][kCountedOrdinals];

std::atomic<int64_t>& op_counter(const Device& d) {
  const int kind = static_cast<int>(d.kind);
  const int index = d.index < 0 ? 0 : (d.index < kCountedOrdinals ? d.index : kCountedOrdinals - 1);
  return g_op_counts[kind < 0 || kind > 2 ? 0 : kind][index];
}

}  // namespace

void same_shape(const char* op, const GpuMatrix& a, const GpuMatrix& b) {
  if (a.shape() != b.shape())
    throw ShapeError(std::string(op) + ": shapes differ: " + a.shape_str() + " and " + b.shape_str());
}

bool overlaps(const GpuMatrix& a, const GpuMatrix& b) {
  if (a.size() == 0 || b.size() == 0 || a.device() != b.device()) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data()), b0 = reinterpret_cast<std::uintptr_t>(b.data());
  const auto a1 = a0 + static_cast<std::uintptr_t>(a.size()) * sizeof(float);
  const auto b1 = b0 + static_cast<std::uintptr_t>(b.size()) * sizeof(float);
  return a0 < b1 && b0 < a1;
}

void not_aliased(const char* op, const GpuMatrix& in, const GpuMatrix& out) {
  if (!overlaps(in, out)) return;
  if (in.data() == out.data())
    throw ShapeError(std::string(op) + ": the output must not be one of the inputs (shape " +
                     out.shape_str() + "); this op cannot work in place");
  throw ShapeError(std::string(op) + ": the output " + out.shape_str() + " shares memory with an input " +
                   in.shape_str() + " (overlapping views); this op cannot work in place");
}

void in_place_or_disjoint(const char* op, const GpuMatrix& in, const GpuMatrix& out) {
  if (overlaps(in, out) && (in.data() != out.data() || in.size() != out.size()))
    throw ShapeError(std::string(op) + ": the output " + out.shape_str() + " partially overlaps an input " +
                     in.shape_str() +
                     " (views of one buffer at different offsets); write in place into the input "
                     "itself or into separate memory");
}

void require_ndim(const char* op, const char* what, const GpuMatrix& m, int64_t ndim) {
  if (m.ndim() != ndim)
    throw ShapeError(std::string(op) + ": " + what + " must be " + std::to_string(ndim) + "-D, got shape " +
                     m.shape_str());
}

void finish(const GpuMatrix& m) {
  op_counter(m.device()).fetch_add(1, std::memory_order_relaxed);
  if (m.device().is_cuda() && sync_after_each_op()) synchronize(m.device());
}

std::vector<int64_t> strip_leading_ones(const std::vector<int64_t>& s) {
  size_t i = 0;
  while (i < s.size() && s[i] == 1) ++i;
  return std::vector<int64_t>(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
}

bool is_suffix(const std::vector<int64_t>& suffix, const std::vector<int64_t>& of) {
  if (suffix.size() > of.size()) return false;
  return std::equal(suffix.begin(), suffix.end(), of.end() - static_cast<std::ptrdiff_t>(suffix.size()));
}

std::string dims_str(std::vector<int64_t> v) { return shape_to_string(v); }

AxisView axis_view(const char* op, const GpuMatrix& m, int64_t axis, int64_t* normalized) {
  const int64_t nd = m.ndim();
  if (nd < 1 || axis < -nd || axis >= nd)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for shape " +
                     m.shape_str());
  const int64_t a = axis < 0 ? axis + nd : axis;
  if (normalized) *normalized = a;
  AxisView v{1, m.dim(a), 1};
  for (int64_t i = 0; i < a; ++i) v.outer *= m.dim(i);
  for (int64_t i = a + 1; i < nd; ++i) v.inner *= m.dim(i);
  return v;
}

void reduced_shape(const char* op, const char* what, const GpuMatrix& full, int64_t a, const GpuMatrix& r) {
  std::vector<int64_t> keep = full.shape(), drop = full.shape();
  keep[static_cast<size_t>(a)] = 1;
  drop.erase(drop.begin() + static_cast<std::ptrdiff_t>(a));
  if (r.shape() != keep && r.shape() != drop)
    throw ShapeError(std::string(op) + ": " + what + " has shape " + r.shape_str() + ", expected " +
                     dims_str(drop) + " or " + dims_str(keep) + " (" + full.shape_str() +
                     " reduced along axis " + std::to_string(a) + ")");
}

int64_t pooled_size(int64_t in, int64_t k, int64_t stride, int64_t pad) {
  int64_t span = in + 2 * pad - k;
  return span < 0 ? 0 : span / stride + 1;
}

void check_window_param(const std::string& op, const char* what, int64_t v, int64_t lowest) {
  if (v < lowest || v > kMaxWindowParam)
    throw ShapeError(op + ": " + what + " must be between " + std::to_string(lowest) +
                     " and 2147483647 (2^31 - 1), got " + std::to_string(v));
}

std::vector<int64_t> check_tensor_lists(const char* op, const std::vector<TensorList>& lists) {
  const TensorList& params = lists[0];
  const size_t count = params.arrays.size();
  for (const TensorList& l : lists)
    if (l.arrays.size() != count)
      throw ShapeError(std::string(op) + ": got " + std::to_string(l.arrays.size()) + " " + l.plural +
                       " for " + std::to_string(count) + " " + params.plural);
  if (count > 2147483647u) throw ShapeError(std::string(op) + ": too many tensors");
  for (const TensorList& l : lists)
    for (size_t i = 0; i < count; ++i)
      if (l.arrays[i] == nullptr)
        throw ShapeError(std::string(op) + ": " + l.name + " " + std::to_string(i) + " is a null array");
  std::vector<int64_t> sizes(count);
  if (count == 0) return sizes;
  const Device& device = params.arrays[0]->device();
  struct Span {
    const float* begin;
    const float* end;
    size_t list, tensor;
  };
  std::vector<Span> spans;
  spans.reserve(count * lists.size());
  for (size_t i = 0; i < count; ++i) {
    const GpuMatrix& p = *params.arrays[i];
    for (size_t k = 0; k < lists.size(); ++k) {
      const GpuMatrix& a = *lists[k].arrays[i];
      // The message is built only on an error: a training step calls this every step.
      auto what = [&] { return std::string(op) + ": " + lists[k].name + " " + std::to_string(i); };
      if (a.device() != device)
        throw ShapeError(what() + " is on " + a.device().str() + ", not on " + device.str() +
                         " (arrays are on different devices)");
      if (a.shape() != p.shape())
        throw ShapeError(what() + " has shape " + a.shape_str() + ", its parameter " + p.shape_str());
      if (a.size() > 0) spans.push_back({a.data(), a.data() + a.size(), k, i});
    }
    sizes[i] = p.size();
  }
  // Sorted by start, a span overlaps an earlier one exactly when it starts before the largest end
  // seen so far; tracking that end over all spans and over written spans finds every forbidden pair.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const Span* furthest = nullptr;          // the earlier span reaching furthest
  const Span* furthest_written = nullptr;  // ... among written spans
  for (const Span& s : spans) {
    const Span* other = lists[s.list].written ? furthest : furthest_written;
    if (other != nullptr && other->end > s.begin) {
      const TensorList& a = lists[s.list];
      const TensorList& b = lists[other->list];
      throw ShapeError(std::string(op) + ": " + a.name + " " + std::to_string(s.tensor) +
                       " shares memory with " + b.name + " " + std::to_string(other->tensor) +
                       "; every array the step writes must be distinct from all the others");
    }
    if (furthest == nullptr || s.end > furthest->end) furthest = &s;
    if (lists[s.list].written && (furthest_written == nullptr || s.end > furthest_written->end))
      furthest_written = &s;
  }
  return sizes;
}

namespace {
std::atomic<bool>& deterministic_algorithms() {
  static std::atomic<bool> mode{false};
  return mode;
}
}  // namespace

bool are_deterministic_algorithms_enabled() {
  return deterministic_algorithms().load(std::memory_order_relaxed);
}
void use_deterministic_algorithms(bool mode) {
  deterministic_algorithms().store(mode, std::memory_order_relaxed);
}

int64_t op_count(const Device& device) { return op_counter(device).load(std::memory_order_relaxed); }

void count_ops(const Device& device, int64_t n) {
  op_counter(device).fetch_add(n, std::memory_order_relaxed);
}

}  // namespace gpumat::ops
