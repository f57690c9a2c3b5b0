// Host matmul through BLAS sgemm (OpenBLAS from the scipy-openblas32 wheel, whose symbols carry the
// scipy_ prefix). Row-major: a stored (m, k) or (k, m) when trans_a; b (k, n) or (n, k); c (m, n).
// ops.cpp guarantees every dimension fits a 32-bit blasint.
#include <cblas.h>

#include "kernels.h"

namespace gpumat::host {

void matmul(int, const float* a, bool trans_a, const float* b, bool trans_b, float* c, int64_t m, int64_t n,
            int64_t k) {
  const blasint lda = static_cast<blasint>(trans_a ? m : k);
  const blasint ldb = static_cast<blasint>(trans_b ? k : n);
  scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, lda,
                    b, ldb, 0.0f, c, static_cast<blasint>(n));
}

}  // namespace gpumat::host
