// Host matmul through BLAS sgemm (OpenBLAS from the scipy-openblas32 wheel, whose symbols carry the
// scipy_ prefix). Row-major: a stored (m, k) or (k, m) when trans_a; b (k, n) or (n, k); c (m, n).
// ops/matmul.cpp guarantees every dimension fits a 32-bit blasint.
#include <cblas.h>

#include <algorithm>

#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

void matmul(int, const float* a, bool trans_a, const float* b, bool trans_b, float* c, int64_t m, int64_t n,
            int64_t k) {
  const blasint lda = static_cast<blasint>(trans_a ? m : k);
  const blasint ldb = static_cast<blasint>(trans_b ? k : n);
  scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, lda,
                    b, ldb, 0.0f, c, static_cast<blasint>(n));
}

// c (m, n) = op(a) @ op(b) + bias (n,), then max(., 0) when relu (a dense layer's epilogue):
// sgemm, then one OpenMP pass over c (the unfused graph makes three: broadcast, add, relu).
void matmul_bias(int dev, const float* a, bool trans_a, const float* b, bool trans_b, const float* bias,
                 float* c, int64_t m, int64_t n, int64_t k, bool relu) {
  matmul(dev, a, trans_a, b, trans_b, c, m, n, k);
  parallel_for(m, m * n, [&](int64_t r) {
    float* row = c + r * n;
    if (relu)
      for (int64_t j = 0; j < n; ++j) row[j] = std::max(row[j] + bias[j], 0.0f);
    else
      for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
  });
}

}  // namespace gpumat::host
