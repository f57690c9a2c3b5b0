// The host kernels' one BLAS call (blas.h's sgemm) and the library behind it: oneDNN's dnnl_sgemm
// when gpumat.__init__ found the onednn-cpu-gomp wheel and loaded it (use_onednn), else OpenBLAS
// from scipy-openblas32, which is linked in. oneDNN is loaded at run time with dlopen, not linked,
// so a build never needs it and a machine without it (not x86-64 Linux, GPUMAT_BLAS=openblas)
// runs the same library.
//
// Why oneDNN: its JIT sgemm kernels run the products of the benchmarks' models faster a thread
// than OpenBLAS 0.3.34's (benchmarks/README.md, "The host BLAS"). Each call here is one piece of a
// product (matmul.cpp cuts them), run on one of the host kernels' threads (thread_pool.cpp), and
// runs on that thread alone: OpenMP's thread count is set to 1 around the call, so the GNU OpenMP
// build of oneDNN never starts a team of its own (one threading runtime, gpumat's), and the pieces, which
// depend on the shape alone, keep the results the same bits on any thread count.
#include <cblas.h>
#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>

#include "blas.h"
#include "gpumat/error.h"
#include "gpumat/ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace gpumat::host {
namespace {

// oneDNN's C API (oneapi/dnnl/dnnl.h), declared here so the build needs no oneDNN headers:
// dnnl_sgemm is row-major, C = alpha op(A) op(B) + beta C, returning dnnl_success (0) or an error.
using DnnlSgemm = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                          int64_t ldc);
struct DnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using DnnlVersionFn = const DnnlVersion* (*)();
constexpr unsigned kDnnlRuntimeOmp = 2;  // DNNL_RUNTIME_OMP: dnnl_version_t::cpu_runtime of an OpenMP build

std::atomic<DnnlSgemm> onednn_sgemm{nullptr};
std::string onednn_name;  // written once, before onednn_sgemm is published

void openblas_sgemm(const float* a, bool trans_a, int64_t lda, const float* b, bool trans_b, int64_t ldb,
                    float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, float beta, float alpha) {
  const auto op = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  scipy_cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(m), static_cast<blasint>(n),
                    static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
                    static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// OpenMP's thread count for the calling thread's next regions set to 1 while it lives (oneDNN's
// OpenMP build sizes its teams by omp_get_max_threads()).
class OneThread {
 public:
#ifdef _OPENMP
  OneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved_); }

 private:
  int saved_;
#endif
};

}  // namespace

void sgemm(const float* a, bool trans_a, int64_t lda, const float* b, bool trans_b, int64_t ldb, float* c,
           int64_t ldc, int64_t m, int64_t n, int64_t k, float beta, float alpha) {
  const DnnlSgemm fn = onednn_sgemm.load(std::memory_order_acquire);
  // an empty product (k = 0: c = beta c) is OpenBLAS's, whose rules for it the callers rely on
  if (fn != nullptr && m > 0 && n > 0 && k > 0) {
    OneThread one;
    if (fn(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0)
      return;
    // a status other than success (arguments are checked before this, so not expected): OpenBLAS
    // computes the piece instead; dnnl_sgemm writes c only on success
  }
  openblas_sgemm(a, trans_a, lda, b, trans_b, ldb, c, ldc, m, n, k, beta, alpha);
}

}  // namespace gpumat::host

namespace gpumat {

std::string ops::use_onednn(const std::string& path) {
  static std::mutex loading;
  const std::lock_guard<std::mutex> lock(loading);
  if (host::onednn_sgemm.load() != nullptr) return host::onednn_name;
  // closed again unless it passes every check below
  std::unique_ptr<void, int (*)(void*)> lib(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL), dlclose);
  if (lib == nullptr) throw ShapeError("use_onednn: cannot load " + path + ": " + dlerror());
  const auto fn = reinterpret_cast<host::DnnlSgemm>(dlsym(lib.get(), "dnnl_sgemm"));
  const auto version = reinterpret_cast<host::DnnlVersionFn>(dlsym(lib.get(), "dnnl_version"));
  const host::DnnlVersion* v = version != nullptr ? version() : nullptr;
  if (fn == nullptr || v == nullptr)
    throw ShapeError("use_onednn: " + path + " has no dnnl_sgemm or dnnl_version: not oneDNN");
  if (v->cpu_runtime != host::kDnnlRuntimeOmp)
    throw ShapeError("use_onednn: " + path +
                     " is not an OpenMP build of oneDNN (a second threading runtime)");
  // A small product of every transpose against the plain sum, before any kernel relies on it.
  const float a[6] = {1.5f, -2.0f, 0.25f, 3.0f, -1.0f, 0.5f}, b[6] = {2.0f, 1.0f, -0.5f, 4.0f, 0.75f, -3.0f};
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    host::OneThread one;
    const int status =
        fn(ta ? 'T' : 'N', tb ? 'T' : 'N', 2, 2, 3, 1.0f, a, ta ? 2 : 3, b, tb ? 3 : 2, 0.0f, c, 2);
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        float want = 0.0f;
        for (int p = 0; p < 3; ++p)
          want += (ta ? a[p * 2 + i] : a[i * 3 + p]) * (tb ? b[j * 3 + p] : b[p * 2 + j]);
        if (status != 0 || !(std::fabs(c[i * 2 + j] - want) <= 1e-5f))  // a NaN fails too
          throw ShapeError("use_onednn: dnnl_sgemm of " + path + " failed its check (status " +
                           std::to_string(status) + ")");
      }
    }
  }
  host::onednn_name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                      std::to_string(v->patch) + " (dnnl_sgemm, GNU OpenMP build)";
  host::onednn_sgemm.store(fn, std::memory_order_release);
  lib.release();  // loaded for the life of the process
  return host::onednn_name;
}

std::string ops::host_blas() {
  if (host::onednn_sgemm.load() != nullptr) return host::onednn_name;
  const char* config = scipy_openblas_get_config();
  return std::string(config != nullptr ? config : "OpenBLAS") + " (scipy-openblas32)";
}

}  // namespace gpumat
