// Host matmul through BLAS sgemm (blas.cpp: oneDNN's when it is installed, else OpenBLAS from the
// scipy-openblas32 wheel). Row-major: a stored (m, k) or (k, m) when trans_a; b (k, n) or (n, k);
// c (m, n). ops/matmul.cpp guarantees every dimension fits a 32-bit blasint.
//
// One threading runtime: the BLAS runs single-threaded (blas.cpp; OpenBLAS's own count is 1:
// parallel.cpp) and a product is split into pieces that the host kernels' threads (thread_pool.cpp)
// take from a shared queue, one single-threaded sgemm a piece. Why not the BLAS's own pool
// (OpenBLAS's threads, or oneDNN's OpenMP teams):
// - its threads and the host kernels' (then OpenMP's) took turns on the cores, and any spinning of one pool
// stole
//   the cores from the other: after PyTorch had loaded libgomp first (its default policy spins),
//   gpumat's MLP step took 48-52 ms instead of 8-10 ms;
// - OpenBLAS splits a product by its thread count, so the last bits of c depended on the count;
//   the pieces here depend on the shape alone, so c is the same bits on any count of threads and
//   under any load (what lets the thread count follow the machine's load: parallel.cpp);
// - a region's threads take pieces as they come free, so a thread slowed by another process on its
//   core takes fewer pieces instead of holding up the product.
#include <algorithm>
#include <vector>

#include "blas.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {
namespace {
// Products below this many multiply-adds run as one call: a region costs more than it saves.
constexpr int64_t kSplitMinMacs = int64_t{1} << 21;
// A product is cut into one piece per CPU online, each of at least kPieceMinMacs multiply-adds and
// kPieceMinSide rows or columns of c. One piece per CPU because each piece repacks the operand all
// pieces share (OpenBLAS packs both operands per call): the 1000x256x784 product of the MLP's
// first layer took 1.66 ms on two CPUs as two pieces, 1.80 ms as four and 2.10 ms as seven or
// eight (benchmarks/README.md, "Matrix products, attention and layer norm on the host"). More
// pieces balance a thread slowed by another process, but cost that much on an idle machine;
// GPUMAT_DYNAMIC_THREADS answers load instead. The CPUs online, not the thread count: the pieces,
// and so c's bits, stay the same on one machine whatever set_num_threads or the load makes it.
constexpr int64_t kPieceMinMacs = int64_t{1} << 20;
constexpr int64_t kPieceMinSide = 128;
// Piece edges fall on multiples of 16 rows or columns (one AVX-512 vector of floats), so inner
// pieces fill whole register blocks of OpenBLAS's kernels and only the last has a ragged edge.
constexpr int64_t kPieceAlign = 16;
// A product cut along k keeps at most this many floats of partial products (4 MiB).
constexpr int64_t kDepthPartsMax = int64_t{1} << 20;

// How a product (m, n, k), one of `products` run together (bmm), is cut: `count` pieces of `size`
// rows of c (kRows), columns (kColumns) or steps of k (kDepth), from the shapes alone. The longer
// side of c is cut: each piece then repacks the other operand, the smaller one to repack. When c's
// sides are too short for a piece a CPU, or k is at least twice c's longer side (weight gradients:
// (128, 128) or (128, 512) summed over 2048 rows), k is cut instead: each piece packs only its
// share of both operands, and the partial products are added in piece order (kDepth; only for one
// product, where the caller allows it: matmul and matmul_bias). A GPT's (128, 128, 2048) weight
// gradient took 0.61 ms as one piece (c's sides too short to cut) and 0.27 ms as two along k, its
// (128, 512, 2048) 1.15 ms as two pieces of columns and 1.04 ms along k (2 CPUs). A batch of at
// least as many products as CPUs is not cut at all: the products are the pieces.
enum class Along { kRows, kColumns, kDepth };

struct Pieces {
  Along along;
  int64_t size;
  int64_t count;
};

int64_t aligned_size(int64_t length, int64_t count) {
  const int64_t size = ((length + count - 1) / count + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
  return std::min(size, length);
}

Pieces pieces_of(int64_t m, int64_t n, int64_t k, int64_t products = 1, bool allow_depth = false) {
  const Along along = m >= n ? Along::kRows : Along::kColumns;
  const int64_t side = along == Along::kRows ? m : n;
  const int64_t macs = m * n * k;
  if (side == 0) return {along, 0, 1};  // an empty c: one call, which writes nothing
  const int64_t per_product = (cpus_online() + products - 1) / products;
  const int64_t want = macs < kSplitMinMacs ? 1 : std::min(per_product, macs / kPieceMinMacs);
  const int64_t by_side = std::max<int64_t>(1, std::min(want, side / kPieceMinSide));
  const int64_t by_depth = std::max<int64_t>(1, std::min(want, k / kPieceMinSide));
  const bool depth_first = by_depth > by_side || (by_depth == by_side && k >= 2 * std::max(m, n));
  if (allow_depth && by_depth > 1 && depth_first && (by_depth - 1) * m * n <= kDepthPartsMax) {
    const int64_t size = aligned_size(k, by_depth);
    return {Along::kDepth, size, (k + size - 1) / size};
  }
  const int64_t size = aligned_size(side, by_side);
  return {along, size, (side + size - 1) / size};
}

// Piece p of one product: c's rows or columns [lo, lo + len) from the matching rows of op(a) or
// columns of op(b); or, cut along k, the product of op(a)'s columns and op(b)'s rows [lo, lo + len)
// into c (piece 0, with beta) or into the (m, n) matrix p - 1 of parts (the others, beta 0).
void piece(const Pieces& cut, int64_t p, const float* a, bool trans_a, const float* b, bool trans_b, float* c,
           int64_t m, int64_t n, int64_t k, float beta, float* parts = nullptr) {
  const int64_t lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  const int64_t lo = p * cut.size;
  switch (cut.along) {
    case Along::kRows: {
      const int64_t len = std::min(cut.size, m - lo);
      sgemm(a + (trans_a ? lo : lo * lda), trans_a, lda, b, trans_b, ldb, c + lo * n, n, len, n, k, beta);
      return;
    }
    case Along::kColumns: {
      const int64_t len = std::min(cut.size, n - lo);
      sgemm(a, trans_a, lda, b + (trans_b ? lo * ldb : lo), trans_b, ldb, c + lo, n, m, len, k, beta);
      return;
    }
    case Along::kDepth: {
      const int64_t len = std::min(cut.size, k - lo);
      sgemm(a + (trans_a ? lo * lda : lo), trans_a, lda, b + (trans_b ? lo : lo * ldb), trans_b, ldb,
            p == 0 ? c : parts + (p - 1) * m * n, n, m, n, len, p == 0 ? beta : 0.0f);
      return;
    }
  }
}

// The partial products of pieces 1.. of a product cut along k (at least two pieces), (count - 1)
// (m, n) matrices in a buffer of the calling thread's, kept for its next product (kDepthPartsMax
// floats at most).
float* depth_parts(const Pieces& cut, int64_t m, int64_t n) {
  thread_local std::vector<float> parts;
  const size_t need = static_cast<size_t>((cut.count - 1) * m * n);
  if (parts.size() < need) parts.resize(need);
  return parts.data();
}

// c += the partial products, in piece order (so c's bits come from the shape alone), then
// max(c, 0) when relu.
void add_depth_parts(const Pieces& cut, const float* parts, float* c, int64_t m, int64_t n, bool relu) {
  const int64_t size = m * n;
  for (int64_t p = 1; p < cut.count; ++p) {
    const float* part = parts + (p - 1) * size;
#pragma omp simd
    for (int64_t i = 0; i < size; ++i) c[i] += part[i];
  }
  if (relu)
    for (int64_t i = 0; i < size; ++i) c[i] = std::max(c[i], 0.0f);
}
}  // namespace

void matmul(int, const float* a, bool trans_a, const float* b, bool trans_b, float* c, int64_t m, int64_t n,
            int64_t k) {
  const Pieces cut = pieces_of(m, n, k, 1, true);
  float* parts = cut.along == Along::kDepth ? depth_parts(cut, m, n) : nullptr;
  run_tasks(cut.count, true,
            [&](int64_t p) { piece(cut, p, a, trans_a, b, trans_b, c, m, n, k, 0.0f, parts); });
  if (parts) add_depth_parts(cut, parts, c, m, n, false);
}

// c (m, n) = op(a) @ op(b) + bias (n,), then max(., 0) when relu (a dense layer's epilogue), as
// BLAS's addmm: each piece's block of c is set to the bias rows first and the piece's sgemm adds
// the product (beta = 1), then the ReLU runs over the block while it is in cache. With beta = 0
// OpenBLAS clears c in a pass of its own, so the bias costs no pass (a pass after the product did:
// about 0.25 ms of the GPT step's 2048x512 layer on the 2-core host).
void matmul_bias(int, const float* a, bool trans_a, const float* b, bool trans_b, const float* bias, float* c,
                 int64_t m, int64_t n, int64_t k, bool relu) {
  const Pieces cut = pieces_of(m, n, k, 1, true);
  const bool depth = cut.along == Along::kDepth;
  float* parts = depth ? depth_parts(cut, m, n) : nullptr;
  run_tasks(cut.count, true, [&](int64_t p) {
    if (depth && p > 0) {
      piece(cut, p, a, trans_a, b, trans_b, c, m, n, k, 0.0f, parts);
      return;
    }
    const int64_t lo = p * cut.size;
    const bool rows_cut = cut.along == Along::kRows, columns_cut = cut.along == Along::kColumns;
    const int64_t r0 = rows_cut ? lo : 0, r1 = rows_cut ? std::min(m, lo + cut.size) : m;
    const int64_t j0 = columns_cut ? lo : 0, j1 = columns_cut ? std::min(n, lo + cut.size) : n;
    for (int64_t r = r0; r < r1; ++r) std::copy(bias + j0, bias + j1, c + r * n + j0);
    piece(cut, p, a, trans_a, b, trans_b, c, m, n, k, 1.0f);
    if (!relu || depth) return;  // cut along k, the ReLU waits for the partial products
    for (int64_t r = r0; r < r1; ++r) {
      float* row = c + r * n;
      for (int64_t j = j0; j < j1; ++j) row[j] = std::max(row[j], 0.0f);
    }
  });
  if (depth) add_depth_parts(cut, parts, c, m, n, relu);
}

// c[i] = op(a[i]) @ op(b[i]) for i < batch (kernels.def's bmm: a stride of 0 repeats a matrix; c's
// stride 0 sums the products). The threads take (product, piece) pairs from one queue; a summed c
// splits into pieces only, each adding the batch's products in order (beta 1 after the first), so
// its sums are the same bits on any count of threads.
void bmm(int, const float* a, bool trans_a, int64_t stride_a, const float* b, bool trans_b, int64_t stride_b,
         float* c, int64_t stride_c, int64_t batch, int64_t m, int64_t n, int64_t k) {
  if (stride_c == 0) {
    const Pieces cut = pieces_of(m, n, k);
    run_tasks(cut.count, true, [&](int64_t p) {
      for (int64_t i = 0; i < batch; ++i)
        piece(cut, p, a + i * stride_a, trans_a, b + i * stride_b, trans_b, c, m, n, k, i > 0 ? 1.0f : 0.0f);
    });
    return;
  }
  const Pieces cut = pieces_of(m, n, k, batch);
  run_tasks(batch * cut.count, batch * m * n * k >= kSplitMinMacs, [&](int64_t t) {
    const int64_t i = t / cut.count;
    piece(cut, t % cut.count, a + i * stride_a, trans_a, b + i * stride_b, trans_b, c + i * stride_c, m, n, k,
          0.0f);
  });
}

}  // namespace gpumat::host
