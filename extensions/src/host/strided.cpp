// Host strided kernels (the reference for ../cuda/strided.cu): copy_strided, map_strided and
// sum_strided over operands walked by a strided::Iter (../strided.h), with the same arithmetic in
// the same order as the CUDA kernels (except sum_strided's sums along a contiguous dim, which add
// in SIMD lanes: equal to rounding). The index space is split into rows of its last dim: each row's
// start offsets come from stepping its index over the leading dims (for_each_row), then a plain
// loop walks the row with each operand's last stride, with map_strided's function chosen once per call
// (a template per op), so a contiguous or broadcast row compiles to a vectorisable loop.
#include "../strided.h"

#include <algorithm>
#include <cstdlib>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

namespace {

// The iteration space without its last dim (the rows), and the last dim's length.
struct Rows {
  strided::Iter lead;
  int64_t count, len;
};

Rows rows_of(const strided::Iter& it, int64_t n) {
  Rows r{it, 1, 1};
  if (it.ndim > 0) {
    r.len = it.size[it.ndim - 1];
    r.lead.ndim = it.ndim - 1;
    r.count = r.len > 0 ? n / r.len : 0;
  } else {
    r.count = n;
  }
  return r;
}

// body(off) for every row, off[k] the row's first element in operand k, rows split across the
// threads in blocks of about kBlockElems elements when `work` is at least kParallelMin. A block's
// first offsets come from its first row's index (a division per dim), the next rows' by stepping
// the row's multi-index like an odometer: a few additions a row. Dividing per row cost more than
// copying a short one (a GPT's head split copies rows of 32 floats: 6x PyTorch's time before).
template <int Count, typename Body>
void for_each_row(const Rows& r, int64_t work, const Body& body) {
  const strided::Iter& it = r.lead;
  const int64_t per_block = std::max<int64_t>(1, kBlockElems / std::max<int64_t>(r.len, 1));
  const int64_t blocks = (r.count + per_block - 1) / per_block;
  parallel_for(blocks, work, [&](int64_t blk) {
    const int64_t lo = blk * per_block, hi = std::min(r.count, lo + per_block);
    int64_t idx[strided::kMaxDims], off[Count] = {};
    int64_t rest = lo;
    for (int d = it.ndim - 1; d >= 0; --d) {
      idx[d] = rest % it.size[d];
      rest /= it.size[d];
      for (int k = 0; k < Count; ++k) off[k] += idx[d] * it.stride[k][d];
    }
    for (int64_t row = lo; row < hi; ++row) {
      body(static_cast<const int64_t*>(off));
      for (int d = it.ndim - 1; d >= 0; --d) {  // the next row's index and offsets
        for (int k = 0; k < Count; ++k) off[k] += it.stride[k][d];
        if (++idx[d] < it.size[d]) break;
        for (int k = 0; k < Count; ++k) off[k] -= it.stride[k][d] * it.size[d];
        idx[d] = 0;
      }
    }
  });
}

template <int Op>
void map_rows(const float* a, const float* b, const float* c, float* out, const strided::Iter& it,
              int64_t n) {
  const Rows r = rows_of(it, n);
  const int last = it.ndim - 1;
  const int64_t s0 = last >= 0 ? it.stride[0][last] : 0, s1 = last >= 0 ? it.stride[1][last] : 0;
  const int64_t s2 = last >= 0 ? it.stride[2][last] : 0, s3 = last >= 0 ? it.stride[3][last] : 0;
  for_each_row<4>(r, n, [&](const int64_t* off) {
    float* o = out + off[0];
    const float *pa = a + off[1], *pb = b + off[2];
    if (c != nullptr) {
      const float* pc = c + off[3];
      for (int64_t j = 0; j < r.len; ++j) o[j * s0] = strided::apply(Op, pa[j * s1], pb[j * s2], pc[j * s3]);
    } else if (s0 == 1 && s1 == 1 && s2 == 1) {  // the common rows, as loops the compiler vectorises
      for (int64_t j = 0; j < r.len; ++j) o[j] = strided::apply(Op, pa[j], pb[j], 0.0f);
    } else if (s0 == 1 && s1 == 1 && s2 == 0) {
      const float bv = *pb;
      for (int64_t j = 0; j < r.len; ++j) o[j] = strided::apply(Op, pa[j], bv, 0.0f);
    } else if (s0 == 1 && s1 == 0 && s2 == 1) {
      const float av = *pa;
      for (int64_t j = 0; j < r.len; ++j) o[j] = strided::apply(Op, av, pb[j], 0.0f);
    } else {
      for (int64_t j = 0; j < r.len; ++j) o[j * s0] = strided::apply(Op, pa[j * s1], pb[j * s2], 0.0f);
    }
  });
}

// out[k * sout] for k in [0, count), count <= kSumColumns: the sum over rows r in [0, rows), in
// order, of first[r * si + k * so]. Compiled also for AVX2 and AVX-512; a row whose outputs are
// contiguous (so == 1, a bias gradient) is a SIMD loop, where the runtime stride left it scalar.
constexpr int64_t kSumColumns = 256;

GPUMAT_SIMD_CLONES void column_sums(const float* first, int64_t so, int64_t si, int64_t rows, int64_t count,
                                    float* out, int64_t sout) {
  alignas(64) float acc[kSumColumns] = {};
  if (so == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = first + r * si;
#pragma omp simd
      for (int64_t k = 0; k < count; ++k) acc[k] += row[k];
    }
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < count; ++k) acc[k] += first[r * si + k * so];
  }
  for (int64_t k = 0; k < count; ++k) out[k * sout] = acc[k];
}

using MapFn = void (*)(const float*, const float*, const float*, float*, const strided::Iter&, int64_t);

template <int... Ops>
constexpr MapFn map_fn(int op, std::integer_sequence<int, Ops...>) {
  MapFn fns[] = {&map_rows<Ops>...};
  return fns[op];
}

}  // namespace

void copy_strided(int, const float* in, float* out, const strided::Iter& it, int64_t n) {
  const Rows r = rows_of(it, n);
  const int last = it.ndim - 1;
  const int64_t s0 = last >= 0 ? it.stride[0][last] : 0, s1 = last >= 0 ? it.stride[1][last] : 0;
  for_each_row<2>(r, n, [&](const int64_t* off) {
    float* o = out + off[0];
    const float* p = in + off[1];
    if (s0 == 1 && s1 == 1) {
      for (int64_t j = 0; j < r.len; ++j) o[j] = p[j];
    } else {
      for (int64_t j = 0; j < r.len; ++j) o[j * s0] = p[j * s1];
    }
  });
}

void map_strided(int, int op, const float* a, const float* b, const float* c, float* out,
                 const strided::Iter& it, int64_t n) {
  map_fn(op, std::make_integer_sequence<int, strided::kNumMapOps>{})(a, b, c, out, it, n);
}

void sum_strided(int, const float* in, float* out, const strided::Iter& outer, const strided::Iter& inner,
                 int64_t n_out, int64_t n_inner) {
  // One kept dim and one summed dim whose elements lie closer together along the kept one (a
  // bias gradient: rows summed into a row): a block of outputs accumulates row after row, so
  // the reads stream through memory. Each output still adds its terms in index order, so the
  // result is the per-output loop's below, bit for bit. A block per CPU (a bias of 128 on two:
  // 64 each; one block of 256 had left it to one thread), of whole vectors, at most kSumColumns:
  // wide blocks read long runs of each row, which the prefetchers follow where a row stride of
  // 2 KB and runs of 64 floats left a (2048, 512) sum 4x slower than one of (2048, 384).
  if (outer.ndim == 1 && inner.ndim == 1 && std::llabs(outer.stride[1][0]) < std::llabs(inner.stride[1][0])) {
    const int64_t so = outer.stride[1][0], si = inner.stride[1][0], sout = outer.stride[0][0];
    int64_t width = (n_out + cpus_online() - 1) / cpus_online();
    width = std::min(kSumColumns, std::max<int64_t>(16, (width + 15) / 16 * 16));
    parallel_for((n_out + width - 1) / width, n_out * n_inner, [&](int64_t blk) {
      const int64_t o0 = blk * width;
      column_sums(in + o0 * so, so, si, n_inner, std::min(width, n_out - o0), out + o0 * sout, sout);
    });
    return;
  }
  // One summed dim (a row sum): its terms a fixed stride apart; contiguous ones in SIMD lanes.
  if (inner.ndim == 1) {
    const int64_t si = inner.stride[1][0];
    parallel_for(n_out, n_out * n_inner, [&](int64_t o) {
      int64_t oo[2];
      strided::offsets<2>(outer, o, oo);
      const float* base = in + oo[1];
      float acc = 0.0f;
      if (si == 1) {
#pragma omp simd reduction(+ : acc)
        for (int64_t r = 0; r < n_inner; ++r) acc += base[r];
      } else {
        for (int64_t r = 0; r < n_inner; ++r) acc += base[r * si];
      }
      out[oo[0]] = acc;
    });
    return;
  }
  parallel_for(n_out, n_out * n_inner, [&](int64_t o) {
    int64_t oo[2];
    strided::offsets<2>(outer, o, oo);
    const float* base = in + oo[1];
    float acc = 0.0f;
    for (int64_t r = 0; r < n_inner; ++r) {
      int64_t ri[2];
      strided::offsets<2>(inner, r, ri);
      acc += base[ri[1]];
    }
    out[oo[0]] = acc;
  });
}

}  // namespace gpumat::host
