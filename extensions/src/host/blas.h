// The one BLAS call of the host kernels, shared by matmul.cpp, conv.cpp and attention.cpp.
#pragma once
#include <cstdint>

namespace gpumat::host {

// One single-threaded sgemm (blas.cpp: oneDNN's or OpenBLAS's, each on one thread), row-major:
// c (m, n) = alpha op(a) @ op(b) + beta c, beta 0 or 1; lda, ldb, ldc are the stored rows' lengths
// (each at least 1 and the row's width: BLAS rejects less). Callers parallelise by running several on
// the pool's threads (run_tasks in parallel.h).
void sgemm(const float* a, bool trans_a, int64_t lda, const float* b, bool trans_b, int64_t ldb, float* c,
           int64_t ldc, int64_t m, int64_t n, int64_t k, float beta, float alpha = 1.0f);

}  // namespace gpumat::host
