// Host normalisation kernels (the norm family; CUDA twins and the formulas in ../cuda/norm.cu):
//   layer_norm, layer_norm_stats, layer_norm_gradient, layer_norm_weight_gradient over rows of x
//   (rows, d), one row per task; layer_norm_backward, the last three and dy's column sums in one
//   pass over chunks of rows; batch_norm_stats, batch_norm, batch_norm_gradient,
//   batch_norm_weight_gradient per channel of x (n, c, inner), one channel per task.
// Statistics two-pass (mean, then the mean of squared deviations) with sums in double, each in
// a fixed order within its task, so the result is the same on any thread count. A row's sums go
// to eight double lanes (element j to lane j % 8, the lanes added pairwise at the end): SIMD code
// where one running sum waited four cycles an element; the layer norm weight gradient sums each
// column over chunks of rows in row order (rows outer so that the columns fill the SIMD lanes),
// then the chunks' partial sums in chunk order.
// The layer norm loops are compiled also for AVX2 and AVX-512 (GPUMAT_SIMD_CLONES); their helpers
// are always inlined, since a clone calls a helper compiled for the baseline otherwise (SSE2's two
// double lanes: layer_norm_gradient on 2048x128 took 268 us, 197 us inlined into the clones).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "lane_sum.h"
#include "parallel.h"

namespace gpumat::host {

namespace {

// The weight gradient's split: row chunks of at least kChunkMinRows rows, at most kSumBlocks of
// them and kPartialsMax partial sums in all; column blocks of kWeightColumns.
constexpr int64_t kChunkMinRows = 16;
constexpr int64_t kPartialsMax = int64_t{1} << 16;
constexpr int64_t kWeightColumns = 256;

// lane_sum of term_a and of term_b in one loop over j (each the bits of its own lane_sum).
template <typename TermA, typename TermB>
[[gnu::always_inline]] inline void lane_sums(int64_t d, const TermA& term_a, const TermB& term_b,
                                             double* sum_a, double* sum_b) {
  double la[kLanes] = {}, lb[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
#pragma omp simd
    for (int64_t k = 0; k < kLanes; ++k) {
      la[k] += term_a(j + k);
      lb[k] += term_b(j + k);
    }
  }
  for (int64_t k = 0; j + k < d; ++k) {
    la[k] += term_a(j + k);
    lb[k] += term_b(j + k);
  }
  *sum_a = lane_total(la);
  *sum_b = lane_total(lb);
}

// Row x (d,)'s mean (0 for RMS) and rstd = 1 / sqrt(var + eps).
[[gnu::always_inline]] inline void row_stats(const float* x, int64_t d, float eps, bool rms, double* mean,
                                             double* rstd) {
  const double m =
      rms ? 0.0 : lane_sum(d, [&](int64_t j) { return static_cast<double>(x[j]); }) / static_cast<double>(d);
  const double q = lane_sum(d, [&](int64_t j) {
    const double t = x[j] - m;
    return t * t;
  });
  *mean = m;
  *rstd = 1.0 / std::sqrt(q / static_cast<double>(d) + eps);
}

// Row xr's dx (dxr, d values) from its dy (gr), the weight and its statistics: rstd (g - mean(g) -
// xhat mean(g xhat)), g = dy weight, xhat = (x - mean) rstd (RMS: without mean(g)). With
// kPartials, also adds dy xhat to pw and dy to pb in the same loop (layer_norm_backward's column
// sums).
template <bool kPartials = false>
[[gnu::always_inline]] inline void row_gradient(const float* xr, const float* gr, const float* weight,
                                                float* dxr, int64_t d, double mean, double rstd, bool rms,
                                                double* pw = nullptr, double* pb = nullptr) {
  double sg, sgx;
  lane_sums(
      d, [&](int64_t j) { return static_cast<double>(gr[j]) * weight[j]; },
      [&](int64_t j) {
        const double g = static_cast<double>(gr[j]) * weight[j];
        return g * (xr[j] - mean) * rstd;
      },
      &sg, &sgx);
  const double mg = rms ? 0.0 : sg / static_cast<double>(d), mgx = sgx / static_cast<double>(d);
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) {
    const double g = static_cast<double>(gr[j]) * weight[j];
    dxr[j] = static_cast<float>(rstd * (g - mg - (xr[j] - mean) * rstd * mgx));
    if constexpr (kPartials) {
      pw[j] += static_cast<double>(gr[j]) * (xr[j] - mean) * rstd;
      pb[j] += gr[j];
    }
  }
}

// The weight gradient's row chunks for (rows, d): at least kChunkMinRows rows each, at most
// kSumBlocks of them and kPartialsMax partial sums in all; from the shape alone.
int64_t weight_gradient_chunks(int64_t rows, int64_t d) {
  return std::max<int64_t>(1, std::min({kSumBlocks, rows / kChunkMinRows, kPartialsMax / d}));
}

// The (n, inner) values of channel ch of x (n, c, inner): body(index) for each, in order.
template <typename Body>
void each_in_channel(int64_t ch, int64_t n, int64_t c, int64_t inner, const Body& body) {
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < inner; ++i) body((b * c + ch) * inner + i);
}

// The layer norm loops over a block of rows [r0, r1) (and of columns, for the weight gradient),
// compiled also for AVX2 and AVX-512 (GPUMAT_SIMD_CLONES: the double lanes of lane_sum fill a
// vector register; the same bits on each version, no fused multiply-add). A block of rows is a
// task; the rows' results do not depend on the blocks.
GPUMAT_SIMD_CLONES void layer_norm_rows(const float* x, const float* weight, const float* bias, float* out,
                                        float* stats, int64_t r0, int64_t r1, int64_t d, float eps,
                                        bool rms) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * d;
    double mean, rstd;
    row_stats(xr, d, eps, rms, &mean, &rstd);
    if (stats) {
      stats[2 * r] = static_cast<float>(mean);
      stats[2 * r + 1] = static_cast<float>(rstd);
    }
    if (out) {
#pragma omp simd
      for (int64_t j = 0; j < d; ++j)
        out[r * d + j] = static_cast<float>((xr[j] - mean) * rstd * weight[j] + bias[j]);
    }
  }
}

GPUMAT_SIMD_CLONES void layer_norm_gradient_rows(const float* x, const float* stats, const float* weight,
                                                 const float* dy, float* dx, int64_t r0, int64_t r1,
                                                 int64_t d, bool rms) {
  for (int64_t r = r0; r < r1; ++r)
    row_gradient(x + r * d, dy + r * d, weight, dx + r * d, d, stats[2 * r], stats[2 * r + 1], rms);
}

// part[j] for the columns j in [j0, j1): the sum over the rows r in [r0, r1), in row order, of
// dy[r, j] * xhat[r, j], in double; rows outer, so the columns fill the SIMD lanes and each row is
// read as one run.
GPUMAT_SIMD_CLONES void layer_norm_weight_gradient_rows(const float* x, const float* stats, const float* dy,
                                                        double* part, int64_t j0, int64_t j1, int64_t r0,
                                                        int64_t r1, int64_t d) {
  std::fill(part + j0, part + j1, 0.0);
  for (int64_t r = r0; r < r1; ++r) {
    const double mean = stats[2 * r];
    const float rstd = stats[2 * r + 1];
    const float* xr = x + r * d;
    const float* gr = dy + r * d;
#pragma omp simd
    for (int64_t j = j0; j < j1; ++j) part[j] += static_cast<double>(gr[j]) * (xr[j] - mean) * rstd;
  }
}

// A chunk of rows [r0, r1) of layer_norm_backward: each row's statistics (rounded to float, as
// layer_norm_stats stores them, so dx and dweight are the separate kernels' bits), its dx as
// layer_norm_gradient_rows computes it, and the chunk's partial sums of dy * xhat (pw) and dy (pb)
// in double, rows in order.
GPUMAT_SIMD_CLONES void layer_norm_backward_rows(const float* x, const float* weight, const float* dy,
                                                 float* dx, double* pw, double* pb, int64_t r0, int64_t r1,
                                                 int64_t d, float eps, bool rms) {
  std::fill(pw, pw + d, 0.0);
  std::fill(pb, pb + d, 0.0);
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * d;
    const float* gr = dy + r * d;
    double mean64, rstd64;
    row_stats(xr, d, eps, rms, &mean64, &rstd64);
    const double mean = static_cast<float>(mean64);
    const float rstd = static_cast<float>(rstd64);
    row_gradient<true>(xr, gr, weight, dx + r * d, d, mean, rstd, rms, pw, pb);
  }
}

// body(r0, r1) over blocks of rows of about kBlockElems elements each, on the pool's threads when
// the rows hold at least kParallelMin elements (parallel_for).
template <typename Body>
void row_blocks(int64_t rows, int64_t d, const Body& body) {
  const int64_t per = std::max<int64_t>(1, kBlockElems / std::max<int64_t>(d, 1));
  parallel_for((rows + per - 1) / per, rows * d,
               [&](int64_t b) { body(b * per, std::min(rows, (b + 1) * per)); });
}

}  // namespace

void layer_norm(int, const float* x, const float* weight, const float* bias, float* out, int64_t rows,
                int64_t d, float eps, bool rms) {
  row_blocks(rows, d, [&](int64_t r0, int64_t r1) {
    layer_norm_rows(x, weight, bias, out, nullptr, r0, r1, d, eps, rms);
  });
}

void layer_norm_stats(int, const float* x, float* stats, int64_t rows, int64_t d, float eps, bool rms) {
  row_blocks(rows, d, [&](int64_t r0, int64_t r1) {
    layer_norm_rows(x, nullptr, nullptr, nullptr, stats, r0, r1, d, eps, rms);
  });
}

void layer_norm_gradient(int, const float* x, const float* stats, const float* weight, const float* dy,
                         float* dx, int64_t rows, int64_t d, bool rms) {
  row_blocks(rows, d, [&](int64_t r0, int64_t r1) {
    layer_norm_gradient_rows(x, stats, weight, dy, dx, r0, r1, d, rms);
  });
}

void layer_norm_weight_gradient(int, const float* x, const float* stats, const float* dy, float* dweight,
                                int64_t rows, int64_t d) {
  // Tasks of (row chunk, column block); each sums its chunk's rows in order into double partials,
  // which are then added in chunk order. The chunks come from the shape alone (as the CUDA
  // kernel's), so the result is the same bits on any thread count. Whole rows in chunks, not whole
  // columns: reading 64-column strips of each row down 2048 rows of a GPT's activations, which
  // come from memory, took 5x the in-cache time.
  const int64_t chunks = weight_gradient_chunks(rows, d);
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  const int64_t blocks = (d + kWeightColumns - 1) / kWeightColumns;
  std::vector<double> part(static_cast<size_t>(chunks * d));
  parallel_for(chunks * blocks, rows * d, [&](int64_t t) {
    const int64_t k = t / blocks, j0 = (t % blocks) * kWeightColumns;
    const int64_t r0 = std::min(rows, k * chunk_rows), r1 = std::min(rows, r0 + chunk_rows);
    layer_norm_weight_gradient_rows(x, stats, dy, part.data() + k * d, j0, std::min(d, j0 + kWeightColumns),
                                    r0, r1, d);
  });
  for (int64_t j = 0; j < d; ++j) {
    double total = 0.0;
    for (int64_t k = 0; k < chunks; ++k) total += part[k * d + j];
    dweight[j] = static_cast<float>(total);
  }
}

void layer_norm_backward(int, const float* x, const float* weight, const float* dy, float* dx, float* dweight,
                         float* dbias, int64_t rows, int64_t d, float eps, bool rms) {
  // One pass over x and dy (the separate kernels read them four times: statistics, gradient,
  // weight gradient, bias sums), in layer_norm_weight_gradient's row chunks, so dweight is its bits.
  const int64_t chunks = weight_gradient_chunks(rows, d);
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  std::vector<double> part(static_cast<size_t>(2 * chunks * d));
  parallel_for(chunks, rows * d, [&](int64_t k) {
    const int64_t r0 = std::min(rows, k * chunk_rows), r1 = std::min(rows, r0 + chunk_rows);
    double* pw = part.data() + 2 * k * d;
    layer_norm_backward_rows(x, weight, dy, dx, pw, pw + d, r0, r1, d, eps, rms);
  });
  for (int64_t j = 0; j < d; ++j) {
    double tw = 0.0, tb = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      tw += part[2 * k * d + j];
      tb += part[2 * k * d + d + j];
    }
    dweight[j] = static_cast<float>(tw);
    dbias[j] = static_cast<float>(tb);
  }
}

void batch_norm_stats(int, const float* x, float* stats, int64_t n, int64_t c, int64_t inner) {
  const double count = static_cast<double>(n * inner);
  parallel_for(c, n * c * inner, [&](int64_t ch) {
    double s = 0.0;
    each_in_channel(ch, n, c, inner, [&](int64_t i) { s += x[i]; });
    const double mean = s / count;
    double q = 0.0;
    each_in_channel(ch, n, c, inner, [&](int64_t i) { q += (x[i] - mean) * (x[i] - mean); });
    stats[2 * ch] = static_cast<float>(mean);
    stats[2 * ch + 1] = static_cast<float>(q / count);
  });
}

void batch_norm(int, const float* x, const float* stats, const float* weight, const float* bias, float* out,
                int64_t n, int64_t c, int64_t inner, float eps) {
  parallel_for(n * c, n * c * inner, [&](int64_t bc) {
    const int64_t ch = bc % c;
    const double mean = stats[2 * ch], rstd = 1.0 / std::sqrt(static_cast<double>(stats[2 * ch + 1]) + eps);
    for (int64_t i = bc * inner; i < (bc + 1) * inner; ++i)
      out[i] = static_cast<float>((x[i] - mean) * rstd * weight[ch] + bias[ch]);
  });
}

void batch_norm_gradient(int, const float* x, const float* stats, const float* weight, const float* dy,
                         float* dx, int64_t n, int64_t c, int64_t inner, float eps, bool training) {
  const double count = static_cast<double>(n * inner);
  parallel_for(c, n * c * inner, [&](int64_t ch) {
    const double mean = stats[2 * ch], rstd = 1.0 / std::sqrt(static_cast<double>(stats[2 * ch + 1]) + eps);
    double mg = 0.0, mgx = 0.0;
    if (training) {
      each_in_channel(ch, n, c, inner, [&](int64_t i) {
        mg += dy[i];
        mgx += static_cast<double>(dy[i]) * (x[i] - mean) * rstd;
      });
      mg /= count;
      mgx /= count;
    }
    const double scale = weight[ch] * rstd;
    each_in_channel(ch, n, c, inner, [&](int64_t i) {
      dx[i] = static_cast<float>(scale * (dy[i] - mg - (x[i] - mean) * rstd * mgx));
    });
  });
}

void batch_norm_weight_gradient(int, const float* x, const float* stats, const float* dy, float* dweight,
                                int64_t n, int64_t c, int64_t inner, float eps) {
  parallel_for(c, n * c * inner, [&](int64_t ch) {
    const double mean = stats[2 * ch], rstd = 1.0 / std::sqrt(static_cast<double>(stats[2 * ch + 1]) + eps);
    double s = 0.0;
    each_in_channel(ch, n, c, inner,
                    [&](int64_t i) { s += static_cast<double>(dy[i]) * (x[i] - mean) * rstd; });
    dweight[ch] = static_cast<float>(s);
  });
}

}  // namespace gpumat::host
