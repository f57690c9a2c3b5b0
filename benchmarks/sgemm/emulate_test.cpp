// emulate_test.cpp: runs the ladder's tuned kernels (2-7, the split-K reduce and the dispatcher)
// on the CPU, one OS thread per CUDA thread, to check their indexing where no GPU is at hand.
// It proves nothing about speed, and a pass here is no substitute for the GPU check (`make check`
// on a GPU): it cannot see hardware-only failure modes (bank conflicts, real cp.async timing,
// alignment faults, compiler bugs in SASS). What it does check, for every transpose case, load
// path (float4 / scalar) and tile config, on awkward shapes:
//   - every output written (c poisoned with NaN), nothing written outside c (guard cells),
//   - no read outside a and b that reaches the result (NaN guard cells around the inputs),
//   - no read of shared memory that nothing wrote (dynamic shared memory poisoned with NaN per block),
//   - cp.async ordering in two modes: copies land at issue, or only at the wait (the latest time
//     the hardware may deliver them), so a read before the wait or a missing barrier shows up,
//   - the result against a float64 reference (rel. error < 1e-5).
// Build and run: make emulate   (g++ only; needs the CUDA headers, not a GPU or cuBLAS)
//   ./emulate_test [--quick | --shape M,N,K]

#define SGEMM_EMULATE 1
#define __shared__ static  // one block runs at a time, so static storage is block-shared
#define __launch_bounds__(...)

#include <cuda_runtime.h>  // vector types, dim3, host versions of the qualifiers

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace emu {
thread_local uint3 thread_idx, block_idx;
dim3 block_dim, grid_dim;
std::barrier<>* barrier = nullptr;
int cp_async_mode = 0;  // 0: a copy lands at issue; 1: at cp_async_wait_all
struct Copy {
  void* dst;
  const void* src;
  bool valid;
};
thread_local std::vector<Copy> pending;
std::vector<float4> dyn_smem;

inline void do_copy(const Copy& c) {
  if (c.valid) std::memcpy(c.dst, c.src, 16);
  else std::memset(c.dst, 0, 16);
}
}  // namespace emu

#define threadIdx emu::thread_idx
#define blockIdx emu::block_idx
#define blockDim emu::block_dim
#define gridDim emu::grid_dim

inline void __syncthreads() { emu::barrier->arrive_and_wait(); }
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
using std::max;
using std::min;
inline float* dynamic_smem() { return reinterpret_cast<float*>(emu::dyn_smem.data()); }
inline void emu_cp_async16(void* dst, const void* src, bool valid) {
  if (emu::cp_async_mode == 0) emu::do_copy({dst, src, valid});
  else emu::pending.push_back({dst, src, valid});
}
inline void emu_cp_async_wait_all() {
  for (const auto& c : emu::pending) emu::do_copy(c);
  emu::pending.clear();
}

namespace emu {
// Runs kernel(args...) over the grid: blocks one after another, each with one OS thread per CUDA
// thread and a std::barrier for __syncthreads; dynamic shared memory poisoned with NaN per block.
template <class... P>
struct Launcher {
  void (*kernel)(P...);
  dim3 grid, block;
  size_t smem;
  Launcher(void (*k)(P...), dim3 g, dim3 b, size_t s) : kernel(k), grid(g), block(b), smem(s) {}
  template <class... A>
  void operator()(A... args) const {
    grid_dim = grid, block_dim = block;
    const unsigned nt = block.x * block.y * block.z;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          dyn_smem.assign(smem / sizeof(float4) + 1, make_float4(nan, nan, nan, nan));
          std::barrier<> bar(nt);
          barrier = &bar;
          std::vector<std::thread> threads;
          threads.reserve(nt);
          for (unsigned t = 0; t < nt; ++t)
            threads.emplace_back([&, t] {
              thread_idx = make_uint3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
              block_idx = make_uint3(bx, by, bz);
              pending.clear();
              kernel(args...);
              if (!pending.empty()) {
                std::fprintf(stderr, "emulator: a thread ended with cp.async copies never waited for\n");
                std::exit(3);
              }
            });
          for (auto& th : threads) th.join();
        }
  }
};
}  // namespace emu

#define SGEMM_LAUNCH(kernel, grid, block, smem, stream) emu::Launcher(kernel, dim3(grid), dim3(block), smem)
#define cudaFuncSetAttribute(...) cudaSuccess
#define cudaGetLastError() cudaSuccess

#include "sgemm_ladder.cu"

// ============================================================================ the test

namespace {

constexpr int kGuard = 37;  // guard cells before and after every buffer

struct Case {
  int m, n, k;
};

// A buffer with NaN (inputs) or sentinel (output) guard cells around `n` floats starting `offset`
// floats after a 16-byte boundary.
struct Buf {
  std::vector<float4> store;
  float* base;
  float* data;
  int64_t n;
  Buf(int64_t n_, int offset, float guard) : n(n_) {
    store.resize(static_cast<size_t>((n + 2 * kGuard + offset) / 4 + 2));
    base = reinterpret_cast<float*>(store.data());
    std::fill(base, base + store.size() * 4, guard);
    data = base + kGuard + 3 + offset;  // kGuard + 3 = 40: data is 16-byte aligned when offset == 0
  }
  bool guards_intact(float guard) const {
    for (float* p = base; p < data; ++p)
      if (!(std::isnan(guard) ? std::isnan(*p) : *p == guard)) return false;
    for (float* p = data + n; p < base + store.size() * 4; ++p)
      if (!(std::isnan(guard) ? std::isnan(*p) : *p == guard)) return false;
    return true;
  }
};

double rel_err(const float* out, const std::vector<double>& ref, int64_t n, int64_t* nonfinite) {
  double num = 0, den = 0;
  *nonfinite = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      ++*nonfinite;
      continue;
    }
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return *nonfinite ? NAN : std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::vector<Case> cases = {{1, 1, 1},     {3, 5, 7},     {17, 33, 9},   {64, 64, 64},  {65, 63, 17},
                             {128, 128, 16}, {130, 258, 100}, {36, 20, 52}, {1, 300, 40}, {200, 8, 33},
                             {96, 100, 10},  {140, 132, 260}, {4, 4, 4},   {132, 260, 68}, {68, 196, 1000},
                             {584, 12, 20},  {1100, 8, 12}};  // > 8 block rows: two groups of the block order
  // (sizes that are multiples of 4 take the float4 / cp.async path, the others the scalar one)
  if (quick) cases = {{3, 5, 7}, {36, 20, 52}, {130, 258, 100}, {132, 260, 68}};
  if (argc > 2 && std::string(argv[1]) == "--shape") {  // --shape M,N,K: that one shape only
    Case c{};
    if (std::sscanf(argv[2], "%d,%d,%d", &c.m, &c.n, &c.k) != 3) return 64;
    cases = {c};
  }
  struct Variant {
    const char* name;
    int kernel;  // 2, 3, 4, 5, 6, 7
    int splits;
  };
  const Variant variants[] = {{"k2", 2, 1}, {"k3", 3, 1}, {"k4", 4, 1}, {"k5 s1", 5, 1},
                              {"k5 s3", 5, 3}, {"k5 s8", 5, 8}, {"k6", 6, 0}, {"k7", 7, 1}};
  const int kSms = 4;  // a small "GPU" so that the dispatcher's split-K branch is exercised
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float sentinel = 12345.0f;
  int runs = 0, failures = 0;

  for (const Case& cs : cases) {
    for (int tcase = 0; tcase < 4; ++tcase) {
      const bool ta = tcase & 2, tb = tcase & 1;
      for (int offset : {0, 1}) {
        const int m = cs.m, n = cs.n, k = cs.k;
        Buf a(static_cast<int64_t>(m) * k, offset, nan), b(static_cast<int64_t>(k) * n, offset, nan);
        for (int64_t i = 0; i < a.n; ++i) a.data[i] = uni(rng);
        for (int64_t i = 0; i < b.n; ++i) b.data[i] = uni(rng);
        std::vector<double> ref(static_cast<size_t>(m) * n);
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int p = 0; p < k; ++p)
              s += static_cast<double>(ta ? a.data[static_cast<int64_t>(p) * m + i] : a.data[static_cast<int64_t>(i) * k + p]) *
                   (tb ? b.data[static_cast<int64_t>(j) * k + p] : b.data[static_cast<int64_t>(p) * n + j]);
            ref[static_cast<size_t>(i) * n + j] = s;
          }
        for (const Variant& v : variants) {
          for (int mode : {0, 1}) {
            if (mode == 1 && (v.kernel == 2 || v.kernel == 3)) continue;  // no cp.async there
            emu::cp_async_mode = mode;
            Buf c(static_cast<int64_t>(m) * n, offset, sentinel);
            std::fill(c.data, c.data + c.n, nan);
            Buf ws(std::max<int64_t>(1, 16LL * m * n), 0, sentinel);
            std::string note;
            using namespace tuned;
            switch (v.kernel) {
              case 2: k2::launch(a.data, ta, b.data, tb, c.data, m, n, k, nullptr); break;
              case 3: launch_warptile<Cfg3>(a.data, ta, b.data, tb, c.data, m, n, k, 1, nullptr, 0, nullptr); break;
              case 4: launch_warptile<Cfg4>(a.data, ta, b.data, tb, c.data, m, n, k, 1, nullptr, 0, nullptr); break;
              case 5: {
                const int used = launch_warptile<Cfg5>(a.data, ta, b.data, tb, c.data, m, n, k, v.splits, ws.data, ws.n, nullptr);
                note = "split " + std::to_string(used);
                break;
              }
              case 6: note = dispatch(a.data, ta, b.data, tb, c.data, m, n, k, ws.data, ws.n, kSms, nullptr); break;
              case 7: launch_warptile<Cfg7>(a.data, ta, b.data, tb, c.data, m, n, k, 1, nullptr, 0, nullptr); break;
            }
            int64_t nonfinite = 0;
            const double err = rel_err(c.data, ref, c.n, &nonfinite);
            const bool guards = c.guards_intact(sentinel) && ws.guards_intact(sentinel);
            const bool ok = nonfinite == 0 && err < 1e-5 && guards;
            ++runs;
            if (!ok) {
              ++failures;
              std::printf("FAIL %-6s %s m=%d n=%d k=%d %s%s cp.async %s: rel err %.3e, %lld non-finite, guards %s %s\n",
                          v.name, (!ta ? (!tb ? "NN" : "NT") : (!tb ? "TN" : "TT")), m, n, k, offset ? "misaligned" : "aligned", "",
                          mode ? "at wait" : "at issue", err, static_cast<long long>(nonfinite),
                          guards ? "intact" : "OVERWRITTEN", note.c_str());
            }
          }
        }
      }
    }
    std::printf("m=%d n=%d k=%d: done (%d runs so far, %d failed)\n", cs.m, cs.n, cs.k, runs, failures);
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", runs - failures, failures);
  return failures ? 1 : 0;
}
