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
  blas_threads();
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

// c[i] = op(a[i]) @ op(b[i]) for i < batch (kernels.def's bmm: a stride of 0 repeats a matrix; c's
// stride 0 sums the products). OpenBLAS's strided batched sgemm when its 32-bit strides hold ours
// (it spreads the batch over its threads); else, and for a summed c, one sgemm per product (beta 1
// after the first adds it to c).
void bmm(int, const float* a, bool trans_a, int64_t stride_a, const float* b, bool trans_b, int64_t stride_b,
         float* c, int64_t stride_c, int64_t batch, int64_t m, int64_t n, int64_t k) {
  const int64_t kBlasMax = 2147483647;
  blas_threads();
  if (stride_c != 0 && batch > 1 && stride_a <= kBlasMax && stride_b <= kBlasMax && stride_c <= kBlasMax) {
    scipy_cblas_sgemm_batch_strided(
        CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
        static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a,
        static_cast<blasint>(trans_a ? m : k), static_cast<blasint>(stride_a), b,
        static_cast<blasint>(trans_b ? k : n), static_cast<blasint>(stride_b), 0.0f, c,
        static_cast<blasint>(n), static_cast<blasint>(stride_c), static_cast<blasint>(batch));
    return;
  }
  for (int64_t i = 0; i < batch; ++i) {
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                      static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f,
                      a + i * stride_a, static_cast<blasint>(trans_a ? m : k), b + i * stride_b,
                      static_cast<blasint>(trans_b ? k : n), stride_c == 0 && i > 0 ? 1.0f : 0.0f,
                      c + i * stride_c, static_cast<blasint>(n));
  }
}

}  // namespace gpumat::host
