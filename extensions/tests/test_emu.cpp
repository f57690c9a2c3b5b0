// Runs every op of the emulated CUDA device (the CUDA kernel sources under the emulator) against the
// host device on awkward shapes: tails of every tile, 1x1, all four matmul transposes, long softmax
// rows. Outputs start as NaN, so an element a kernel forgets to write fails. Built and run by
// `make emu-check`, and with AddressSanitizer + UBSan by `make emu-sanitize`, where an out-of-range
// access in a kernel ends the run with the kernel's name.
//
//   test_emu                 every case; exit 1 on a mismatch
//   test_emu --oob-global    a kernel that writes one element past its array (must be caught)
//   test_emu --oob-shared    a kernel that writes past a __shared__ array (must be caught)
#include <cuda_runtime.h>  // the emulator's (compiled with -DGPUMAT_EMULATED -Isrc/emu)

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gpumat/allocator.h"
#include "gpumat/device.h"
#include "gpumat/error.h"
#include "gpumat/gpu_matrix.h"
#include "gpumat/ops.h"

using gpumat::Device;
using gpumat::GpuMatrix;
using Shape = std::vector<int64_t>;
using Arrays = std::vector<GpuMatrix>;

namespace {

int g_failures = 0, g_cases = 0;
std::mt19937_64 g_rng(20261123);
std::string g_setting;  // appended to failure reports: the emulator setting the cases ran under

// Sets an environment variable for one scope (the emulator reads these at every launch).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

int64_t elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<float> random_values(int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g_rng);
  return v;
}

// Runs `op` on the host and on emu:0 with the same random inputs and NaN-filled outputs, and compares
// every output element: |emu - host| <= tol * (1 + |host|).
void check(const std::string& name, const std::vector<Shape>& ins, const std::vector<Shape>& outs,
           const std::function<void(Arrays&)>& op, float tol = 1e-5f, float lo = -1.0f, float hi = 1.0f) {
  ++g_cases;
  std::vector<std::vector<float>> data;
  for (const Shape& s : ins) data.push_back(random_values(elements(s), lo, hi));
  std::vector<std::vector<float>> results[2];
  const Device devices[2] = {Device::host(), Device::emu(0)};
  for (int d = 0; d < 2; ++d) {
    Arrays arrays;
    for (size_t i = 0; i < ins.size(); ++i) {
      arrays.emplace_back(ins[i], devices[d]);
      arrays.back().copy_from_host(data[i].data(), arrays.back().size());
    }
    for (const Shape& s : outs) {
      arrays.emplace_back(s, devices[d]);
      std::vector<float> nan(static_cast<size_t>(arrays.back().size()), NAN);
      arrays.back().copy_from_host(nan.data(), arrays.back().size());
    }
    try {  // a fault in a kernel is reported when the results are copied back (launches are queued)
      op(arrays);
      for (size_t o = 0; o < outs.size(); ++o) {
        GpuMatrix& m = arrays[ins.size() + o];
        std::vector<float> v(static_cast<size_t>(m.size()));
        m.copy_to_host(v.data(), m.size());
        results[d].push_back(std::move(v));
      }
    } catch (const std::exception& e) {
      std::printf("FAIL %s%s on %s: %s\n", name.c_str(), g_setting.c_str(), devices[d].str().c_str(),
                  e.what());
      ++g_failures;
      return;
    }
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    const auto &h = results[0][o], &e = results[1][o];
    for (size_t i = 0; i < h.size(); ++i) {
      const bool ok =
          (std::isnan(h[i]) && std::isnan(e[i])) || std::fabs(e[i] - h[i]) <= tol * (1 + std::fabs(h[i]));
      if (!ok) {
        std::printf("FAIL %s%s: output %zu element %zu: emu %.9g, host %.9g\n", name.c_str(),
                    g_setting.c_str(), o, i, e[i], h[i]);
        ++g_failures;
        return;
      }
    }
  }
}

// A shape as "3x1x5" ("scalar" for a 0-d one), for case names; dims({m, n, k}) too.
std::string dims(const Shape& d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s.empty() ? "scalar" : s;
}

void elementwise_cases() {
  namespace ops = gpumat::ops;
  for (int64_t n : {1, 31, 257, 4099}) {
    const std::string t = " n=" + std::to_string(n);
    check("add" + t, {{n}, {n}}, {{n}}, [](Arrays& a) { ops::add(a[0], a[1], a[2]); });
    check("mul" + t, {{n}, {n}}, {{n}}, [](Arrays& a) { ops::mul(a[0], a[1], a[2]); });
    check("add_scalar" + t, {{n}}, {{n}}, [](Arrays& a) { ops::add_scalar(a[0], 0.75f, a[1]); });
    check("mul_scalar" + t, {{n}}, {{n}}, [](Arrays& a) { ops::mul_scalar(a[0], -1.5f, a[1]); });
    check("relu" + t, {{n}}, {{n}}, [](Arrays& a) { ops::relu(a[0], a[1]); });
    check("relu_gradient" + t, {{n}, {n}}, {{n}}, [](Arrays& a) { ops::relu_gradient(a[0], a[1], a[2]); });
    check("axpy" + t, {{n}, {n}}, {}, [](Arrays& a) { ops::axpy(0.3f, a[0], a[1]); });
    check("fill" + t, {}, {{n}}, [](Arrays& a) { ops::fill(a[0], 2.5f); });
    check("copy" + t, {{n}}, {{n}}, [](Arrays& a) { ops::copy(a[0], a[1]); });
    check("uniform" + t, {}, {{n}}, [](Arrays& a) { ops::uniform(a[0], -2.0f, 3.0f, 77); }, 0.0f);
    check("normal" + t, {}, {{n}}, [](Arrays& a) { ops::normal(a[0], 1.0f, 2.0f, 78); }, 1e-6f);
    check("randint" + t, {}, {{n}}, [](Arrays& a) { ops::randint(a[0], -70, 1000, 79); }, 0.0f);
    check(
        "adam_update" + t, {{n}, {n}, {n}, {n}}, {},
        [](Arrays& a) { ops::adam_update(a[0], a[1], a[2], a[3], 1e-3f, 0.9f, 0.999f, 1e-8f, 3); }, 1e-5f,
        0.01f, 1.0f);
    check("mse_loss" + t, {{n}, {n}}, {{1}}, [](Arrays& a) { ops::mse_loss(a[0], a[1], a[2]); }, 1e-5f);
    check("l1_loss" + t, {{n}, {n}}, {{1}}, [](Arrays& a) { ops::l1_loss(a[0], a[1], a[2]); }, 1e-5f);
    check("mse_loss_gradient" + t, {{n}, {n}, {1}}, {{n}},
          [](Arrays& a) { ops::mse_loss_gradient(a[0], a[1], a[2], a[3]); });
    check("l1_loss_gradient" + t, {{n}, {n}, {1}}, {{n}},
          [](Arrays& a) { ops::l1_loss_gradient(a[0], a[1], a[2], a[3]); });
  }
}

// The sort family along every axis, emu vs host exactly: argsort (all, and the first k) of the
// values and of their signs (slices of ties: the stable order's case), values by gather, and
// gather_gradient of those indices.
void sort_cases() {
  namespace ops = gpumat::ops;
  for (const Shape& shape : {Shape{1}, Shape{300}, Shape{3, 257}, Shape{70, 4}, Shape{2, 33, 5}}) {
    for (int64_t ax = 0; ax < static_cast<int64_t>(shape.size()); ++ax) {
      Shape part = shape;
      part[static_cast<size_t>(ax)] = (shape[static_cast<size_t>(ax)] + 1) / 2;
      for (const Shape& out : {shape, part}) {
        std::string t = " ";
        for (int64_t d : shape) t += std::to_string(d) + " ";
        t += "axis " + std::to_string(ax) + " k " + std::to_string(out[static_cast<size_t>(ax)]);
        auto tied_indices = [ax, out](const GpuMatrix& x, bool desc) {
          GpuMatrix signs(x.shape(), x.device()), idx(out, x.device());
          ops::sign(x, signs);
          ops::argsort(signs, idx, ax, desc);
          return idx;
        };
        for (bool desc : {false, true}) {
          const std::string d = desc ? " descending" : "";
          check(
              "argsort" + d + t, {shape}, {out},
              [ax, desc](Arrays& a) { ops::argsort(a[0], a[1], ax, desc); }, 0.0f);
          check(
              "argsort ties" + d + t, {shape}, {out},
              [tied_indices, desc](Arrays& a) { a[1].copy_from(tied_indices(a[0], desc)); }, 0.0f);
        }
        check(
            "gather" + t, {shape}, {out},
            [ax, tied_indices](Arrays& a) { ops::gather(a[0], tied_indices(a[0], true), a[1], ax); }, 0.0f);
        check(
            "gather_gradient" + t, {shape, out}, {shape},
            [ax, tied_indices](Arrays& a) {
              ops::gather_gradient(tied_indices(a[0], false), a[1], a[2], ax);
            },
            0.0f);
      }
    }
  }
}

void layout_cases() {
  namespace ops = gpumat::ops;
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {33, 65}, {64, 32}, {100, 7}, {3, 1000}}) {
    const std::string t = " " + dims({r, c});
    check("transpose" + t, {{r, c}}, {{c, r}}, [](Arrays& a) { ops::transpose(a[0], a[1]); });
    check("broadcast_to" + t, {{c}}, {{r, c}}, [](Arrays& a) { ops::broadcast_to(a[0], a[1]); });
    check("sum_to_size" + t, {{r, c}}, {{c}}, [](Arrays& a) { ops::sum_to_size(a[0], a[1]); }, 1e-5f);
    check(
        "softmax" + t, {{r, c}}, {{r, c}}, [](Arrays& a) { ops::softmax(a[0], a[1], -1); }, 1e-5f, -20.0f,
        20.0f);
    check(
        "cross_entropy" + t, {{r, c}, {r, c}}, {{1}}, [](Arrays& a) { ops::cross_entropy(a[0], a[1], a[2]); },
        1e-5f, 0.0f, 1.0f);
  }
}

// The strided family: every broadcast_binary function over broadcasts in up to 8 dims (either side
// repeated), where, sums back to a shape, and strided copies out of and into arrays (transposes,
// flips, expands, slices with steps).
void strided_cases() {
  namespace ops = gpumat::ops;
  struct Pair {
    Shape a, b, out;
  };
  const Pair pairs[] = {{{3, 1, 5}, {4, 1}, {3, 4, 5}},
                        {{65, 1}, {1, 33}, {65, 33}},
                        {{2, 3, 4, 5}, {3, 1, 1}, {2, 3, 4, 5}},
                        {{1}, {1000}, {1000}},
                        {{}, {7, 3}, {7, 3}},
                        {{2, 1, 2, 1, 2, 1, 2, 1}, {1, 2, 1, 2, 1, 2, 1, 2}, {2, 2, 2, 2, 2, 2, 2, 2}}};
  for (const Pair& p : pairs) {
    const std::string t = " " + dims(p.a) + " " + dims(p.b);
    for (int64_t op = 0; op < 14; ++op)
      check("broadcast_binary " + std::to_string(op) + t, {p.a, p.b}, {p.out},
            [op](Arrays& a) { ops::broadcast_binary(a[0], a[1], a[2], op); });
    check("broadcast_where" + t, {p.b, p.a, p.b}, {p.out},
          [](Arrays& a) { ops::broadcast_where(a[0], a[1], a[2], a[3]); });
  }
  const Shape sums[][2] = {{{65, 33}, {33}}, {{65, 33}, {65, 1}}, {{2, 3, 4, 5}, {3, 1, 1}},
                           {{1000}, {1}},    {{300, 7}, {1, 7}},  {{2, 2, 2, 2, 2, 2, 2, 2}, {2, 1, 2, 1}}};
  for (const auto& st : sums)
    check(
        "sum_to " + dims(st[0]) + " to " + dims(st[1]), {st[0]}, {st[1]},
        [](Arrays& a) { ops::sum_to(a[0], a[1]); }, 1e-5f);
  struct View {
    Shape in, out;
    ops::Strides stride;
    int64_t offset;
  };
  const View views[] = {{{65, 33}, {33, 65}, {{1, 33}}, 0},              // transpose
                        {{4, 5, 6}, {6, 4, 5}, {{1, 30, 6}}, 0},         // permute
                        {{65, 33}, {65, 33}, {{-33, -1}}, 65 * 33 - 1},  // flip both dims
                        {{3, 1}, {3, 100}, {{1, 0}}, 0},                 // expand
                        {{40, 40}, {13, 7}, {{120, 5}}, 3}};             // slices with steps
  for (const View& v : views) {
    const std::string t = " " + dims(v.in) + " as " + dims(v.out);
    check("as_strided" + t, {v.in}, {v.out},
          [v](Arrays& a) { ops::as_strided(a[0], a[1], v.stride, v.offset); });
    if (v.stride.v[1] != 0)  // the scatter needs distinct addresses: not the expand
      check("as_strided_scatter" + t, {v.out}, {v.in},
            [v](Arrays& a) { ops::as_strided_scatter(a[0], a[1], v.stride, v.offset); });
  }
}

void matmul_cases() {
  namespace ops = gpumat::ops;
  const int64_t shapes[][3] = {{1, 1, 1}, {65, 63, 17}, {64, 64, 16}, {130, 70, 33}, {3, 200, 1}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 2, tb = t & 1;
      const Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
      check(
          "matmul " + dims({m, n, k}) + (ta ? " T" : " N") + (tb ? "T" : "N"), {as, bs}, {{m, n}},
          [ta, tb](Arrays& a) { ops::matmul(a[0], ta, a[1], tb, a[2]); }, 1e-5f);
    }
  }
  // bmm: batches of equal sizes, a repeated operand (batch 1), a summed output (c of batch 1).
  const int64_t batched[][6] = {{3, 3, 3, 65, 63, 17}, {1, 4, 4, 70, 5, 33}, {5, 1, 5, 3, 130, 2},
                                {4, 4, 1, 65, 66, 9},  {1, 1, 1, 1, 1, 1},   {2, 2, 2, 64, 64, 16}};
  for (const auto& s : batched) {
    const int64_t ba = s[0], bb = s[1], bc = s[2], m = s[3], n = s[4], k = s[5];
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 2, tb = t & 1;
      const Shape as = ta ? Shape{ba, k, m} : Shape{ba, m, k}, bs = tb ? Shape{bb, n, k} : Shape{bb, k, n};
      check(
          "bmm " + dims({ba, bb, bc}) + " " + dims({m, n, k}) + (ta ? " T" : " N") + (tb ? "T" : "N"),
          {as, bs}, {{bc, m, n}}, [ta, tb](Arrays& a) { ops::bmm(a[0], ta, a[1], tb, a[2]); }, 1e-5f);
    }
  }
}

// The fused ops, each emu vs host (their equality with the unfused sequences is tested in Python
// against float64 references: tests/runtime/test_fusion.py).
void fused_cases() {
  namespace ops = gpumat::ops;
  const int64_t shapes[][3] = {{1, 1, 1}, {65, 63, 17}, {130, 70, 33}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    for (int t = 0; t < 8; ++t) {
      const bool ta = t & 2, tb = t & 1, relu = t & 4;
      const Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
      check(
          "matmul_bias " + dims({m, n, k}) + (ta ? " T" : " N") + (tb ? "T" : "N") + (relu ? " relu" : ""),
          {as, bs, {n}}, {{m, n}},
          [ta, tb, relu](Arrays& a) { ops::matmul_bias(a[0], ta, a[1], tb, a[2], a[3], relu); }, 1e-5f);
    }
  }
  const int64_t mats[][2] = {{1, 1}, {37, 5}, {300, 70}, {1000, 10}};
  for (const auto& rc : mats) {
    const int64_t r = rc[0], c = rc[1];
    const std::string t = " " + dims({r, c});
    check(
        "relu_bias_gradient" + t, {{r, c}, {r, c}}, {{r, c}, {c}},
        [](Arrays& a) { ops::relu_bias_gradient(a[0], a[1], a[2], a[3]); }, 1e-5f);
    check(
        "cross_entropy_with_gradient" + t, {{r, c}, {r, c}}, {{1}, {r, c}},
        [](Arrays& a) { ops::cross_entropy_with_gradient(a[0], a[1], a[2], a[3]); }, 1e-5f, 0.0f, 1.0f);
  }
  // 40 tensors: two launches of the 32-tensor table on emu, some tensors empty, every eighth past
  // 1,200 elements: under GPUMAT_EMU_MAX_BLOCKS=2 (grid_stride_cases) its threads stride several
  // times, where the other sizes fit one pass of the grid and hide a wrong stride.
  auto multi_size = [](int i) -> int64_t { return (i * 37) % 300 + (i % 8 == 5 ? 1200 : 0); };
  std::vector<Shape> ins, outs;
  for (int i = 0; i < 40; ++i) {
    const int64_t n = multi_size(i);
    ins.push_back({n});
    ins.push_back({n});
    outs.push_back({n});
  }
  check("sgd_update 40 tensors", ins, outs, [](Arrays& a) {
    std::vector<GpuMatrix*> params;
    std::vector<const GpuMatrix*> grads;
    for (int i = 0; i < 40; ++i) {
      ops::copy(a[2 * i], a[80 + i]);
      params.push_back(&a[80 + i]);
      grads.push_back(&a[2 * i + 1]);
    }
    ops::sgd_update(params, grads, 0.25f);
  });
  // Momentum SGD over the same sizes: inputs p, g, v per tensor, outputs the updated p and v; two
  // steps, so the second reads the velocities the first wrote.
  ins.clear();
  outs.clear();
  for (int i = 0; i < 40; ++i) {
    const int64_t n = multi_size(i);
    for (int k = 0; k < 3; ++k) ins.push_back({n});
    for (int k = 0; k < 2; ++k) outs.push_back({n});
  }
  check("momentum_sgd_update 40 tensors", ins, outs, [](Arrays& a) {
    std::vector<GpuMatrix*> params, velocities;
    std::vector<const GpuMatrix*> grads;
    for (int i = 0; i < 40; ++i) {
      ops::copy(a[3 * i], a[120 + 2 * i]);
      ops::copy(a[3 * i + 2], a[121 + 2 * i]);
      params.push_back(&a[120 + 2 * i]);
      velocities.push_back(&a[121 + 2 * i]);
      grads.push_back(&a[3 * i + 1]);
    }
    ops::momentum_sgd_update(params, grads, velocities, 0.25f, 0.9f);
    ops::momentum_sgd_update(params, grads, velocities, 0.125f, 0.5f);
  });
  // Adam: inputs p, g, m, s per tensor (v = s * s, a second moment >= 0), outputs the updated p, m,
  // v after steps 1 and 2.
  ins.clear();
  outs.clear();
  for (int i = 0; i < 40; ++i) {
    const int64_t n = multi_size(i);
    for (int k = 0; k < 4; ++k) ins.push_back({n});
    for (int k = 0; k < 3; ++k) outs.push_back({n});
  }
  check("adam_update_multi 40 tensors", ins, outs, [](Arrays& a) {
    std::vector<GpuMatrix*> params, m, v;
    std::vector<const GpuMatrix*> grads;
    for (int i = 0; i < 40; ++i) {
      GpuMatrix* out = &a[160 + 3 * i];
      ops::copy(a[4 * i], out[0]);
      ops::copy(a[4 * i + 2], out[1]);
      ops::mul(a[4 * i + 3], a[4 * i + 3], out[2]);
      params.push_back(&out[0]);
      m.push_back(&out[1]);
      v.push_back(&out[2]);
      grads.push_back(&a[4 * i + 1]);
    }
    ops::adam_update_multi(params, grads, m, v, 0.01f, 0.9f, 0.999f, 1e-8f, 1);
    ops::adam_update_multi(params, grads, m, v, 0.01f, 0.9f, 0.999f, 1e-8f, 2);
  });
  // The options: coupled then decoupled weight decay with AMSGrad (max_v starts as v), and
  // momentum SGD with dampening, weight decay and Nesterov. Same inputs as Adam's case.
  check("adam_update_multi options 40 tensors", ins, outs, [](Arrays& a) {
    std::vector<GpuMatrix*> params, m, v;
    std::vector<const GpuMatrix*> grads;
    std::vector<GpuMatrix> max_v;
    max_v.reserve(40);
    for (int i = 0; i < 40; ++i) {
      GpuMatrix* out = &a[160 + 3 * i];
      ops::copy(a[4 * i], out[0]);
      ops::copy(a[4 * i + 2], out[1]);
      ops::mul(a[4 * i + 3], a[4 * i + 3], out[2]);
      max_v.emplace_back(out[2].shape(), out[2].device());
      ops::copy(out[2], max_v.back());
      params.push_back(&out[0]);
      m.push_back(&out[1]);
      v.push_back(&out[2]);
      grads.push_back(&a[4 * i + 1]);
    }
    std::vector<GpuMatrix*> mx;
    for (auto& x : max_v) mx.push_back(&x);
    ops::adam_update_multi(params, grads, m, v, 0.01f, 0.9f, 0.999f, 1e-8f, 1, 0.1f, false, mx);
    ops::adam_update_multi(params, grads, m, v, 0.01f, 0.9f, 0.999f, 1e-8f, 2, 0.1f, true, mx);
  });
  ins.clear();
  outs.clear();
  for (int i = 0; i < 40; ++i) {
    const int64_t n = multi_size(i);
    for (int k = 0; k < 3; ++k) ins.push_back({n});
    for (int k = 0; k < 2; ++k) outs.push_back({n});
  }
  check("momentum_sgd_update options 40 tensors", ins, outs, [](Arrays& a) {
    std::vector<GpuMatrix*> params, velocities;
    std::vector<const GpuMatrix*> grads;
    for (int i = 0; i < 40; ++i) {
      ops::copy(a[3 * i], a[120 + 2 * i]);
      ops::copy(a[3 * i + 2], a[121 + 2 * i]);
      params.push_back(&a[120 + 2 * i]);
      velocities.push_back(&a[121 + 2 * i]);
      grads.push_back(&a[3 * i + 1]);
    }
    ops::momentum_sgd_update(params, grads, velocities, 0.25f, 0.9f, 0.3f, 0.05f, false);
    ops::momentum_sgd_update(params, grads, velocities, 0.125f, 0.5f, 0.0f, 0.01f, true);
    ops::sgd_update(params, grads, 0.1f, 0.2f);
  });
  // clip_grad_norm_'s kernels: the 2-norm and the inf-norm of 40 tensors, then the scale by the
  // 2-norm (max_norm below it, so every element changes).
  ins.clear();
  outs.clear();
  for (int i = 0; i < 40; ++i) {
    ins.push_back({multi_size(i)});
    outs.push_back({multi_size(i)});
  }
  outs.push_back({1});
  outs.push_back({1});
  check("total_norm_multi and clip_scale_multi 40 tensors", ins, outs, [](Arrays& a) {
    std::vector<GpuMatrix*> xs;
    std::vector<const GpuMatrix*> cx;
    for (int i = 0; i < 40; ++i) {
      ops::copy(a[i], a[40 + i]);
      xs.push_back(&a[40 + i]);
      cx.push_back(&a[40 + i]);
    }
    ops::total_norm_multi(cx, INFINITY, a[81]);
    ops::total_norm_multi(cx, 2.0f, a[80]);
    ops::clip_scale_multi(xs, a[80], 0.5f);
  });
}

void conv_pool_cases() {
  namespace ops = gpumat::ops;
  // x (N, C, H, W), w (F, C, KH, KW), stride, pad
  struct Conv {
    int64_t n, c, h, w, f, kh, kw, s, p;
  };
  for (const Conv& v :
       {Conv{2, 3, 9, 7, 4, 3, 3, 1, 1}, Conv{3, 2, 8, 8, 5, 2, 2, 2, 0}, Conv{1, 1, 5, 5, 1, 5, 5, 1, 2}}) {
    const int64_t oh = (v.h + 2 * v.p - v.kh) / v.s + 1, ow = (v.w + 2 * v.p - v.kw) / v.s + 1;
    const std::string t = " " + dims({v.n, v.c, v.h, v.w, v.f, v.kh, v.kw, v.s, v.p});
    const Shape xs{v.n, v.c, v.h, v.w}, ws{v.f, v.c, v.kh, v.kw}, ys{v.n, v.f, oh, ow};
    check(
        "conv2d" + t, {xs, ws}, {ys}, [v](Arrays& a) { ops::conv2d(a[0], a[1], a[2], v.s, v.s, v.p, v.p); },
        1e-5f);
    check(
        "conv2d_gradient_input" + t, {ys, ws}, {xs},
        [v](Arrays& a) { ops::conv2d_gradient_input(a[0], a[1], a[2], v.s, v.s, v.p, v.p); }, 1e-5f);
    check(
        "conv2d_gradient_filter" + t, {xs, ys}, {ws},
        [v](Arrays& a) { ops::conv2d_gradient_filter(a[0], a[1], a[2], v.s, v.s, v.p, v.p); }, 1e-5f);
    check("add_channel_bias" + t, {ys, {v.f}}, {ys},
          [](Arrays& a) { ops::add_channel_bias(a[0], a[1], a[2]); });
    check(
        "reduce_sum_channels" + t, {ys}, {{v.f}}, [](Arrays& a) { ops::reduce_sum_channels(a[0], a[1]); },
        1e-5f);
    const int64_t k = v.kh, s = v.s, p = k / 2 < v.p ? k / 2 : v.p;
    const int64_t ph = (v.h + 2 * p - k) / s + 1, pw = (v.w + 2 * p - k) / s + 1;
    const Shape ps{v.n, v.c, ph, pw};
    check("max_pool2d" + t, {xs}, {ps},
          [k, s, p](Arrays& a) { ops::max_pool2d(a[0], a[1], k, k, s, s, p, p); });
    check("max_pool2d_gradient" + t, {xs, ps}, {xs},
          [k, s, p](Arrays& a) { ops::max_pool2d_gradient(a[0], a[1], a[2], k, k, s, s, p, p); });
    check("avg_pool2d" + t, {xs}, {ps},
          [k, s, p](Arrays& a) { ops::avg_pool2d(a[0], a[1], k, k, s, s, p, p); });
    check("avg_pool2d_gradient" + t, {ps}, {xs},
          [k, s, p](Arrays& a) { ops::avg_pool2d_gradient(a[0], a[1], k, k, s, s, p, p); });
    // adaptive windows that shrink (overlapping, uneven) and grow (OH > H)
    for (const Shape& as : {Shape{v.n, v.c, (v.h + 2) / 3, (v.w + 1) / 2}, Shape{v.n, v.c, v.h + 3, 1}}) {
      check("adaptive_avg_pool2d" + t, {xs}, {as}, [](Arrays& a) { ops::adaptive_avg_pool2d(a[0], a[1]); });
      check("adaptive_avg_pool2d_gradient" + t, {as}, {xs},
            [](Arrays& a) { ops::adaptive_avg_pool2d_gradient(a[0], a[1]); });
    }
  }
}

void rnn_cases() {
  namespace ops = gpumat::ops;
  // rows and hidden sizes whose (n, h) state leaves a tail in the last block
  for (auto [n, h] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {5, 33}, {17, 61}}) {
    const std::string t = " n=" + std::to_string(n) + " h=" + std::to_string(h);
    check("lstm_cell" + t, {{n, 4 * h}, {n, h}}, {{n, 2 * h}},
          [](Arrays& a) { ops::lstm_cell(a[0], a[1], a[2]); });
    check("lstm_cell_gradient" + t, {{n, 4 * h}, {n, h}, {n, 2 * h}, {n, 2 * h}}, {{n, 5 * h}},
          [](Arrays& a) { ops::lstm_cell_gradient(a[0], a[1], a[2], a[3], a[4]); });
    check("gru_cell" + t, {{n, 3 * h}, {n, 3 * h}, {n, h}}, {{n, h}},
          [](Arrays& a) { ops::gru_cell(a[0], a[1], a[2], a[3]); });
    check("gru_cell_gradient" + t, {{n, 3 * h}, {n, 3 * h}, {n, h}, {n, h}}, {{n, 7 * h}},
          [](Arrays& a) { ops::gru_cell_gradient(a[0], a[1], a[2], a[3], a[4]); });
  }
}

void layer_cases() {
  namespace ops = gpumat::ops;
  for (int64_t n : {1, 31, 257, 4099}) {
    const std::string t = " n=" + std::to_string(n);
    check("tanh" + t, {{n}}, {{n}}, [](Arrays& a) { ops::tanh(a[0], a[1]); }, 1e-5f, -30.0f, 30.0f);
    check("sigmoid" + t, {{n}}, {{n}}, [](Arrays& a) { ops::sigmoid(a[0], a[1]); }, 1e-5f, -100.0f, 100.0f);
    check("tanh_gradient" + t, {{n}, {n}}, {{n}}, [](Arrays& a) { ops::tanh_gradient(a[0], a[1], a[2]); });
    check("sigmoid_gradient" + t, {{n}, {n}}, {{n}},
          [](Arrays& a) { ops::sigmoid_gradient(a[0], a[1], a[2]); });
    check("dropout" + t, {{n}}, {{n}}, [](Arrays& a) { ops::dropout(a[0], a[1], 0.3f, 99); }, 0.0f);
  }
  // (outer, axis, inner) views of N-d shapes: last axis, middle axis, first axis, a long row.
  struct AxisCase {
    Shape shape;
    int64_t axis;
  };
  for (const AxisCase& c :
       {AxisCase{{1, 1}, -1}, AxisCase{{7, 33}, 1}, AxisCase{{7, 33}, 0}, AxisCase{{3, 5, 4}, 1},
        AxisCase{{2, 3, 4, 5}, 2}, AxisCase{{1, 5000}, -1}, AxisCase{{600, 3}, 0}}) {
    const int64_t a = c.axis < 0 ? c.axis + static_cast<int64_t>(c.shape.size()) : c.axis;
    std::string t = " (";
    for (int64_t d : c.shape) t += std::to_string(d) + ",";
    t += ") axis=" + std::to_string(c.axis);
    Shape reduced = c.shape;
    reduced.erase(reduced.begin() + a);
    const int64_t ax = c.axis;
    check(
        "softmax" + t, {c.shape}, {c.shape}, [ax](Arrays& v) { ops::softmax(v[0], v[1], ax); }, 1e-5f, -20.0f,
        20.0f);
    check(
        "log_softmax" + t, {c.shape}, {c.shape}, [ax](Arrays& v) { ops::log_softmax(v[0], v[1], ax); }, 1e-5f,
        -20.0f, 20.0f);
    check(
        "softmax_gradient" + t, {c.shape, c.shape}, {c.shape},
        [ax](Arrays& v) { ops::softmax_gradient(v[0], v[1], v[2], ax); }, 1e-5f);
    check(
        "log_softmax_gradient" + t, {c.shape, c.shape}, {c.shape},
        [ax](Arrays& v) {
          // y as the forward pass gives it (exp(y) sums to 1 along the axis): with y uniform in
          // [-1, 1] instead, dx = dy - exp(y) * sum(dy) cancels terms ~100x the result on long
          // axes, and a correct float32 sum in another order misses the relative tolerance.
          GpuMatrix y(v[0].shape(), v[0].device());
          ops::log_softmax(v[0], y, ax);
          ops::log_softmax_gradient(y, v[1], v[2], ax);
        },
        1e-5f);
    check("sum" + t, {c.shape}, {reduced}, [ax](Arrays& v) { ops::sum(v[0], v[1], ax); }, 1e-5f);
    check("mean" + t, {c.shape}, {reduced}, [ax](Arrays& v) { ops::mean(v[0], v[1], ax); }, 1e-5f);
    check("amax" + t, {c.shape}, {reduced}, [ax](Arrays& v) { ops::amax(v[0], v[1], ax); });
    check("broadcast_dim" + t, {reduced}, {c.shape},
          [ax](Arrays& v) { ops::broadcast_dim(v[0], v[1], ax, 0.5f); });
    // y is the true max of x (computed on each device), so the tie test selects real maxima.
    check("amax_gradient" + t, {c.shape, reduced}, {reduced, c.shape}, [ax](Arrays& v) {
      ops::amax(v[0], v[2], ax);
      ops::amax_gradient(v[0], v[2], v[1], v[3], ax);
    });
  }
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {33, 65}, {3, 1000}}) {
    const std::string t = " " + dims({r, c});
    check("nll_loss" + t, {{r, c}, {r, c}}, {{1}}, [](Arrays& a) { ops::nll_loss(a[0], a[1], a[2]); }, 1e-5f);
    check("nll_loss_gradient" + t, {{r, c}, {1}}, {{r, c}},
          [](Arrays& a) { ops::nll_loss_gradient(a[0], a[1], a[2]); });
  }
}

// Sums whose terms cancel: the CUDA reductions accumulate in float64 as the host does, so they
// agree to the final rounding; a float accumulator would be off by ~rows * 2^-24 * 1e4.
void numerics_cases() {
  namespace ops = gpumat::ops;
  for (auto [r, c] : {std::pair<int64_t, int64_t>{4000, 3}, {2000, 40}}) {
    check(
        "sum_to_size with cancellation " + dims({r, c}), {{r, c}}, {{c}},
        [](Arrays& a) { ops::sum_to_size(a[0], a[1]); }, 1e-7f, -1e4f, 1e4f);
    check(
        "reduce_sum_channels with cancellation " + dims({r, c, 3}), {{r, c, 3}}, {{c}},
        [](Arrays& a) { ops::reduce_sum_channels(a[0], a[1]); }, 1e-7f, -1e4f, 1e4f);
  }
}

// Shapes whose tiles outnumber grid.y (the loops over blockIdx.y + i * gridDim.y in transpose and
// matmul) and reductions split into several chunks (the float64 partials and sum_partials). A GPU
// loops only past 65,535 row tiles (2.1M rows for transpose, 4.2M for matmul); lowering the
// emulator's grid.y limit (GPUMAT_EMU_MAX_GRID_Y, read at every launch) reaches the same code with
// small arrays. Each case runs at the GPU's limit and at lowered ones.
__global__ void noop_kernel() {}

// The hook itself: the lowered limit is reported (the launchers size their grids by it) and
// enforced (a launcher that ignored it fails here as it would on a GPU at 65,535).
void grid_limit_hook_case() {
  ++g_cases;
  setenv("GPUMAT_EMU_MAX_GRID_Y", "3", 1);
  int reported = 0;
  cudaDeviceGetAttribute(&reported, cudaDevAttrMaxGridDimY, 0);
  const cudaError_t at =
      gpumat::emulator::launch_kernel(noop_kernel, "noop_kernel", dim3(1, 3), dim3(32), 0, nullptr);
  const cudaError_t over =
      gpumat::emulator::launch_kernel(noop_kernel, "noop_kernel", dim3(1, 4), dim3(32), 0, nullptr);
  cudaGetLastError();  // the refused launch's error is not the next case's
  unsetenv("GPUMAT_EMU_MAX_GRID_Y");
  int restored = 0;
  cudaDeviceGetAttribute(&restored, cudaDevAttrMaxGridDimY, 0);
  if (reported != 3 || at != cudaSuccess || over != cudaErrorInvalidConfiguration || restored != 65535) {
    std::printf("FAIL GPUMAT_EMU_MAX_GRID_Y=3: reported %d, grid.y 3 -> %s, grid.y 4 -> %s, unset -> %d\n",
                reported, cudaGetErrorName(at), cudaGetErrorName(over), restored);
    ++g_failures;
  }
}

void size_cases() {
  namespace ops = gpumat::ops;
  grid_limit_hook_case();
  for (const char* limit : {"", "3", "1"}) {
    setenv("GPUMAT_EMU_MAX_GRID_Y", limit, 1);
    const std::string t = std::string(" grid.y<=") + (*limit ? limit : "65535");
    for (auto [r, c] : {std::pair<int64_t, int64_t>{200, 7}, {97, 70}, {5000, 1}, {3001, 3}, {2500, 40}}) {
      const std::string rc = " " + dims({r, c}) + t;
      check("transpose" + rc, {{r, c}}, {{c, r}}, [](Arrays& a) { ops::transpose(a[0], a[1]); });
      check(
          "sum_to_size" + rc, {{r, c}}, {{c}}, [](Arrays& a) { ops::sum_to_size(a[0], a[1]); }, 1e-6f, 0.1f,
          1.0f);
    }
    check("sum_to_size 0x5" + t, {{0, 5}}, {{5}}, [](Arrays& a) { ops::sum_to_size(a[0], a[1]); });
    check(
        "sum_to_size 200000x1" + t, {{200000, 1}}, {{1}}, [](Arrays& a) { ops::sum_to_size(a[0], a[1]); },
        1e-6f, 0.1f, 1.0f);
    for (auto [n, ch, sp] : {std::tuple<int64_t, int64_t, int64_t>{50, 2, 100}, {3, 5, 1000}, {4000, 1, 1}}) {
      check(
          "reduce_sum_channels " + dims({n, ch, sp}) + t, {{n, ch, sp}}, {{ch}},
          [](Arrays& a) { ops::reduce_sum_channels(a[0], a[1]); }, 1e-6f, 0.1f, 1.0f);
    }
    const int64_t m = 300, n = 20, k = 40;
    for (int tr = 0; tr < 4; ++tr) {
      const bool ta = tr & 2, tb = tr & 1;
      const Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
      check(
          "matmul " + dims({m, n, k}) + (ta ? " T" : " N") + (tb ? "T" : "N") + t, {as, bs}, {{m, n}},
          [ta, tb](Arrays& a) { ops::matmul(a[0], ta, a[1], tb, a[2]); }, 1e-5f);
    }
  }
  unsetenv("GPUMAT_EMU_MAX_GRID_Y");
}

// Every grid-stride loop taking several iterations: with GPUMAT_EMU_MAX_BLOCKS=2 the launchers give
// them at most 2 blocks, so with these sizes each thread strides up to 16 times. A wrong stride
// skips elements (their NaN stays in the output) or writes some twice (racecheck: plain writes of
// two blocks to one address).
void frontend_kernel_cases();
void grid_stride_cases() {
  ScopedEnv cap("GPUMAT_EMU_MAX_BLOCKS", "2");
  g_setting = " (GPUMAT_EMU_MAX_BLOCKS=2)";
  elementwise_cases();
  layout_cases();
  strided_cases();
  fused_cases();
  conv_pool_cases();
  layer_cases();
  rnn_cases();
  frontend_kernel_cases();
  g_setting.clear();
}

// ---------------------------------------------------------------------------- the front end's kernels
// Kept in one block (the front end's ops: exp, log, divide, eq, argmax, one_hot, adadelta_update_multi).
// Elementwise kernels at the
// tails of a 256-thread block (n = 1, 31, 257) and over many blocks (4099, 300001); finite inputs
// (check() compares by difference: the special values inf and NaN are tested in tests/kernels/).
// argmax along the last, first and middle axes, a long row and a long column. one_hot of argmax's
// indices (0..4) mapped to 2i - 3 (out of range below 0 and above 3 for 4 classes) and to i / 2
// (non-integers): rows of zeros in both. Adadelta over 40 tensors (two launches of the 32-tensor
// table), some empty and one past the 1024 blocks a tensor gets (the grid-stride loop's second lap),
// three steps.

void frontend_kernel_cases() {
  namespace ops = gpumat::ops;
  for (int64_t n : {1, 31, 257, 4099, 300001}) {
    const std::string t = " n=" + std::to_string(n);
    check("exp" + t, {{n}}, {{n}}, [](Arrays& a) { ops::exp(a[0], a[1]); }, 1e-6f, -80.0f, 80.0f);
    check("log" + t, {{n}}, {{n}}, [](Arrays& a) { ops::log(a[0], a[1]); }, 1e-6f, 1e-6f, 100.0f);
    // correctly rounded on both devices (the division too), so equal bit for bit
    check("sqrt" + t, {{n}}, {{n}}, [](Arrays& a) { ops::sqrt(a[0], a[1]); }, 0.0f, 0.0f, 100.0f);
    check(
        "sqrt_gradient" + t, {{n}, {n}}, {{n}}, [](Arrays& a) { ops::sqrt_gradient(a[0], a[1], a[2]); }, 0.0f,
        0.01f, 10.0f);
    check("div" + t, {{n}, {n}}, {{n}}, [](Arrays& a) { ops::div(a[0], a[1], a[2]); }, 0.0f);
    // eq of relu(x) and relu(y): equal (0 == 0) where both are negative, a quarter of the elements
    check(
        "eq" + t, {{n}, {n}}, {{n}, {n}, {n}},
        [](Arrays& a) {
          ops::relu(a[0], a[2]);
          ops::relu(a[1], a[3]);
          ops::eq(a[2], a[3], a[4]);
        },
        0.0f);
  }
  // The everyday pointwise ops: the same C library functions on both devices here (the emulated
  // device compiles sinf, erff, ... with the host compiler), so equal bit for bit. Comparisons, logic
  // and where of relu'd inputs (ties at 0, a quarter of the elements); clamp with open and inverted
  // bounds.
  for (int64_t n : {1, 31, 257, 4099, 300001}) {
    const std::string t = " n=" + std::to_string(n);
    using Unary = void (*)(const gpumat::GpuMatrix&, gpumat::GpuMatrix&);
    const std::pair<const char*, Unary> unary[] = {{"abs", ops::abs},
                                                   {"sign", ops::sign},
                                                   {"sin", ops::sin},
                                                   {"cos", ops::cos},
                                                   {"erf", ops::erf},
                                                   {"log1p", ops::log1p},
                                                   {"logical_not", ops::logical_not}};
    for (const auto& [name, f] : unary) {
      check(name + t, {{n}}, {{n}}, [f](Arrays& a) { f(a[0], a[1]); }, 0.0f, -4.0f, 4.0f);
    }
    check("rsqrt" + t, {{n}}, {{n}}, [](Arrays& a) { ops::rsqrt(a[0], a[1]); }, 0.0f, 0.01f, 100.0f);
    check(
        "rsqrt_gradient" + t, {{n}, {n}}, {{n}}, [](Arrays& a) { ops::rsqrt_gradient(a[0], a[1], a[2]); },
        0.0f, 0.1f, 10.0f);
    using Binary = void (*)(const gpumat::GpuMatrix&, const gpumat::GpuMatrix&, gpumat::GpuMatrix&);
    const std::pair<const char*, Binary> binary[] = {{"lt", ops::lt},
                                                     {"le", ops::le},
                                                     {"gt", ops::gt},
                                                     {"ge", ops::ge},
                                                     {"logical_and", ops::logical_and},
                                                     {"logical_or", ops::logical_or},
                                                     {"minimum", ops::minimum},
                                                     {"maximum", ops::maximum}};
    for (const auto& [name, f] : binary) {
      check(
          name + t, {{n}, {n}}, {{n}, {n}, {n}},
          [f](Arrays& a) {
            ops::relu(a[0], a[2]);
            ops::relu(a[1], a[3]);
            f(a[2], a[3], a[4]);
          },
          0.0f);
    }
    check(
        "where" + t, {{n}, {n}, {n}}, {{n}, {n}, {n}},
        [](Arrays& a) {
          ops::relu(a[0], a[3]);
          ops::where(a[3], a[1], a[2], a[4]);
          ops::where(a[3], a[4], a[4], a[5]);  // out aliasing both values
        },
        0.0f);
    check(
        "clamp" + t, {{n}, {n}}, {{n}, {n}, {n}},
        [](Arrays& a) {
          ops::clamp(a[0], -0.5f, 0.25f, a[2]);
          ops::clamp(a[0], 0.5f, -0.5f, a[3]);  // inverted: hi everywhere
          ops::clamp_gradient(a[0], a[1], -0.5f, std::numeric_limits<float>::infinity(), a[4]);
        },
        0.0f);
    // GELU, SiLU, softplus, leaky ReLU, ELU and their gradients from x, hardtanh's gradient; x over
    // (-8, 8) crosses softplus' threshold (beta 1.5, threshold 4) and the kinks. Where both devices
    // call the same C library functions they are equal bit for bit; where the host's are
    // src/host/vec_math.h's SIMD ones (GELU's Phi, an erfc fit; tanh; the sigmoid of SiLU and of
    // softplus' gradient) and CUDA's erfcf, tanhf and expf, float32 rounding apart: a few eps of
    // 1 + |x| (times dy's 8 at most).
    using Act = void (*)(const gpumat::GpuMatrix&, gpumat::GpuMatrix&);
    const std::tuple<const char*, Act, float> acts[] = {
        {"gelu", ops::gelu, 1e-6f}, {"gelu_tanh", ops::gelu_tanh, 1e-6f}, {"silu", ops::silu, 1e-6f}};
    for (const auto& [name, f, tol] : acts) {
      check(name + t, {{n}}, {{n}}, [f](Arrays& a) { f(a[0], a[1]); }, tol, -8.0f, 8.0f);
    }
    using ActGradient = void (*)(const gpumat::GpuMatrix&, const gpumat::GpuMatrix&, gpumat::GpuMatrix&);
    const std::tuple<const char*, ActGradient, float> act_gradients[] = {
        {"gelu_gradient", ops::gelu_gradient, 1e-6f},
        // its 1 - tanh^2 near tanh = +-1 turns tanh's rounding into up to ~1e-6 relative
        {"gelu_tanh_gradient", ops::gelu_tanh_gradient, 1e-5f},
        {"silu_gradient", ops::silu_gradient, 1e-6f}};
    for (const auto& [name, f, tol] : act_gradients) {
      check(name + t, {{n}, {n}}, {{n}}, [f](Arrays& a) { f(a[0], a[1], a[2]); }, tol, -8.0f, 8.0f);
    }
    check(
        "softplus, leaky_relu, elu, hardtanh_gradient" + t, {{n}, {n}}, {{n}, {n}, {n}, {n}, {n}, {n}},
        [](Arrays& a) {
          ops::softplus(a[0], 1.5f, 4.0f, a[2]);
          ops::leaky_relu(a[0], 0.07f, a[3]);
          ops::leaky_relu_gradient(a[0], a[1], 0.07f, a[4]);
          ops::elu(a[0], 0.8f, a[5]);
          ops::elu_gradient(a[0], a[1], 0.8f, a[6]);
          ops::hardtanh_gradient(a[0], a[1], -2.0f, 3.0f, a[7]);
        },
        0.0f, -8.0f, 8.0f);
    check(
        "softplus_gradient" + t, {{n}, {n}}, {{n}},
        [](Arrays& a) { ops::softplus_gradient(a[0], a[1], 1.5f, 4.0f, a[2]); }, 1e-6f, -8.0f, 8.0f);
  }
  struct AxisCase {
    Shape shape;
    int64_t axis;
  };
  for (const AxisCase& c : {AxisCase{{1, 1}, -1}, AxisCase{{7, 33}, 1}, AxisCase{{7, 33}, 0},
                            AxisCase{{3, 5, 4}, 1}, AxisCase{{2, 3, 4, 5}, -2}, AxisCase{{1, 5000}, -1},
                            AxisCase{{600, 3}, 0}, AxisCase{{70000, 2}, 1}}) {
    const int64_t a = c.axis < 0 ? c.axis + static_cast<int64_t>(c.shape.size()) : c.axis;
    std::string t = " (";
    for (int64_t d : c.shape) t += std::to_string(d) + ",";
    t += ") axis=" + std::to_string(c.axis);
    Shape reduced = c.shape;
    reduced.erase(reduced.begin() + a);
    const int64_t ax = c.axis;
    check("argmax" + t, {c.shape}, {reduced}, [ax](Arrays& v) { ops::argmax(v[0], v[1], ax); }, 0.0f);
  }
  // issue 35: prod and its gradient (values 0.5 .. 1.5: products stay finite), cumsum both ways
  // and in place, on the same axis cases; then the pow kernels and tril / triu.
  for (const AxisCase& c : {AxisCase{{1, 1}, -1}, AxisCase{{7, 33}, 1}, AxisCase{{7, 33}, 0},
                            AxisCase{{3, 5, 4}, 1}, AxisCase{{2, 3, 4, 5}, -2}, AxisCase{{600, 3}, 0}}) {
    const int64_t a = c.axis < 0 ? c.axis + static_cast<int64_t>(c.shape.size()) : c.axis;
    std::string t = " (";
    for (int64_t d : c.shape) t += std::to_string(d) + ",";
    t += ") axis=" + std::to_string(c.axis);
    Shape reduced = c.shape;
    reduced.erase(reduced.begin() + a);
    const int64_t ax = c.axis;
    check(
        "prod" + t, {c.shape, reduced}, {reduced, c.shape},
        [ax](Arrays& v) {
          ops::prod(v[0], v[2], ax);
          ops::prod_gradient(v[0], v[1], v[3], ax);
        },
        1e-5f, 0.5f, 1.5f);
    check(
        "cumsum" + t, {c.shape}, {c.shape, c.shape},
        [ax](Arrays& v) {
          ops::cumsum(v[0], v[1], ax, false);
          ops::cumsum(v[0], v[2], ax, true);
          ops::cumsum(v[2], v[2], ax, false);  // in place
        },
        0.0f);
  }
  for (int64_t n : {1, 255, 4099}) {
    check(
        "pow n=" + std::to_string(n), {{n}, {n}, {n}}, {{n}, {n}, {n}, {n}, {n}},
        [](Arrays& v) {
          ops::pow_scalar(v[0], 1.7f, v[3]);
          ops::pow_scalar_gradient(v[0], v[1], -0.5f, v[4]);
          ops::scalar_pow(v[2], 2.5f, v[5]);
          ops::scalar_pow_gradient(v[2], v[1], 0.7f, v[6]);
          ops::pow(v[0], v[2], v[7]);
        },
        1e-5f, 0.5f, 1.5f);
  }
  for (const Shape& s : {Shape{1, 1}, Shape{5, 7}, Shape{7, 5}, Shape{3, 33, 40}}) {
    check(
        "tril/triu " + std::to_string(elements(s)), {s}, {s, s, s},
        [](Arrays& v) {
          ops::tril(v[0], v[1], -1);
          ops::triu(v[0], v[2], 2);
          ops::tril(v[0], v[3], 0);
          ops::triu(v[3], v[3], 0);  // in place: the diagonal
        },
        0.0f);
  }
  for (int64_t n : {1, 31, 257, 4099, 70001}) {
    check(
        "one_hot n=" + std::to_string(n), {{n, 5}}, {{n}, {n}, {n, 4}, {n}, {n, 4}},
        [](Arrays& a) {
          ops::argmax(a[0], a[1], 1);
          ops::mul_scalar(a[1], 2.0f, a[2]);
          ops::add_scalar(a[2], -3.0f, a[2]);
          ops::one_hot(a[2], a[3]);
          ops::mul_scalar(a[1], 0.5f, a[4]);
          ops::one_hot(a[4], a[5]);
        },
        0.0f);
  }
  // inputs p, g, s, t per tensor (square_avg = s * s, acc_delta = t * t: averages of squares are
  // >= 0); outputs the updated p, square_avg, acc_delta
  std::vector<Shape> ins, outs;
  for (int i = 0; i < 40; ++i) {
    const int64_t n = i == 7 ? 270001 : (i * 37) % 300;
    for (int k = 0; k < 4; ++k) ins.push_back({n});
    for (int k = 0; k < 3; ++k) outs.push_back({n});
  }
  check(
      "adadelta_update_multi 40 tensors", ins, outs,
      [](Arrays& a) {
        std::vector<GpuMatrix*> params, square_avgs, acc_deltas;
        std::vector<const GpuMatrix*> grads;
        for (int i = 0; i < 40; ++i) {
          GpuMatrix* out = &a[160 + 3 * i];
          ops::copy(a[4 * i], out[0]);
          ops::mul(a[4 * i + 2], a[4 * i + 2], out[1]);
          ops::mul(a[4 * i + 3], a[4 * i + 3], out[2]);
          params.push_back(&out[0]);
          square_avgs.push_back(&out[1]);
          acc_deltas.push_back(&out[2]);
          grads.push_back(&a[4 * i + 1]);
        }
        ops::adadelta_update_multi(params, grads, square_avgs, acc_deltas, 1.0f, 0.9f, 1e-6f);
        ops::adadelta_update_multi(params, grads, square_avgs, acc_deltas, 0.5f, 0.5f, 1e-3f);
        ops::adadelta_update_multi(params, grads, square_avgs, acc_deltas, 0.7f, 0.0f, 1e-2f);
      },
      1e-5f);
}

// ---------------------------------------------------------------------------- the emulator's own checks
// Kernels that break CUDA's rules, or rely on its guarantees, launched straight through the emulator:
// each must be reported (or behave) as a GPU would make it fail (or work), or as compute-sanitizer's
// memcheck, racecheck and initcheck would report it.

cudaStream_t stream0() { return reinterpret_cast<cudaStream_t>(gpumat::cuda_stream(Device::emu(0))); }

// Launches on emu:0's stream (gpumat's, so arrays' copies are ordered with it) and waits: the
// launch's configuration error, else the fault found while the kernel ran (returned by the
// synchronization, as on a GPU).
template <typename... P, typename... A>
cudaError_t run(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, size_t smem, A... args) {
  const cudaError_t e = gpumat::emulator::launch_kernel(kernel, name, grid, block, smem, stream0(), args...);
  return e != cudaSuccess ? e : cudaStreamSynchronize(stream0());
}
#define RUN(kernel, ...) run(kernel, #kernel, __VA_ARGS__)

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) return;  // these threads never reach the barrier
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void shuffle_from_exited_lane_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 0);
}

// out[0] = sum of 0..63 by a butterfly of xor shuffles in each warp plus a ballot check.
__global__ void warp_sum_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const unsigned odd = __ballot_sync(0xffffffffu, threadIdx.x % 2);
  __shared__ float warp_sums[2];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = odd == 0xAAAAAAAAu ? v : -1.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = warp_sums[0] + warp_sums[1];
}

// Each thread reads the slot its neighbour wrote, with (Sync) or without the barrier between.
template <bool Sync>
__global__ void neighbour_kernel(float* out) {
  __shared__ float slot[256];
  slot[threadIdx.x] = static_cast<float>(threadIdx.x) + 1.0f;
  if (Sync) __syncthreads();
  out[threadIdx.x] = slot[(threadIdx.x + 1) % 256];
}

// Lane 0 of each warp writes, the warp synchronizes, every lane reads: ordered by __syncwarp().
template <bool Sync>
__global__ void warp_handoff_kernel(float* out) {
  __shared__ float per_warp[8];
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = static_cast<float>(threadIdx.x);
  if (Sync) __syncwarp();
  out[threadIdx.x] = per_warp[threadIdx.x / 32];
}

__global__ void dynamic_smem_kernel(float* out) {
  float* s = static_cast<float*>(gpumat::emulator::dynamic_smem());
  s[threadIdx.x] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

// cp.async lands at the wait: before it the destination still holds the old value.
__global__ void cp_async_kernel(const float* src, float* out) {
  __shared__ float4 dst[1];
  if (threadIdx.x == 0) {
    dst[0] = make_float4(-1.0f, -1.0f, -1.0f, -1.0f);
    gpumat::emulator::cp_async(&dst[0], src, 16, 16);
    gpumat::emulator::cp_async_commit();
    out[0] = dst[0].x;  // a read before the wait: undefined on a GPU, the old value here
    gpumat::emulator::cp_async_wait(0);
    out[1] = dst[0].x;
  }
}

void expect_error(const char* what, cudaError_t got, cudaError_t want, const char* text) {
  ++g_cases;
  const std::string msg = cudaGetErrorString(got);
  if (got != want || msg.find(text) == std::string::npos) {
    std::printf("FAIL emulator check %s: got %s (%s), want %s mentioning '%s'\n", what, cudaGetErrorName(got),
                msg.c_str(), cudaGetErrorName(want), text);
    ++g_failures;
  }
  cudaGetLastError();  // clear it for the next check
}

void expect_true(const char* what, bool ok) {
  ++g_cases;
  if (!ok) {
    std::printf("FAIL emulator check %s\n", what);
    ++g_failures;
  }
}

void emulator_cases() {
  GpuMatrix arr({1024}, Device::emu(0));
  float* out = arr.data();
  std::vector<float> h(1024);
  auto fetch = [&] { arr.copy_to_host(h.data(), 1024); };

  expect_error("barrier in divergent code", RUN(divergent_barrier_kernel, 1, 32, 0, out),
               cudaErrorLaunchFailure, "16 have exited");
  expect_error("shuffle naming an exited lane", RUN(shuffle_from_exited_lane_kernel, 1, 32, 0, out),
               cudaErrorLaunchFailure, "lane 5");
  expect_error("2048 threads per block", RUN(warp_sum_kernel, 1, 2048, 0, out), cudaErrorInvalidConfiguration,
               "1024 threads");
  expect_error("grid.y of 65536", RUN(warp_sum_kernel, dim3(1, 65536), 64, 0, out),
               cudaErrorInvalidConfiguration, "65535");
  expect_error("64 KiB of dynamic shared memory without opting in",
               RUN(dynamic_smem_kernel, 1, 32, 64 * 1024, out), cudaErrorInvalidConfiguration,
               "dynamic shared memory");
  expect_error(
      "opted in to 64 KiB",
      cudaFuncSetAttribute(dynamic_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
      cudaSuccess, "no error");
  expect_error("64 KiB after opting in", RUN(dynamic_smem_kernel, 1, 32, 64 * 1024, out), cudaSuccess,
               "no error");
  fetch();
  expect_true("dynamic shared memory holds what the block wrote", h[0] == 2.0f && h[31] == 2.0f);

  expect_error("warp sum", RUN(warp_sum_kernel, 1, 64, 0, out), cudaSuccess, "no error");
  fetch();
  expect_true("xor-shuffle sums and the ballot of odd lanes", h[0] == 2016.0f);

  expect_error("neighbours with __syncthreads()", RUN(neighbour_kernel<true>, 1, 256, 0, out), cudaSuccess,
               "no error");
  fetch();
  bool all_right = true;
  for (int t = 0; t < 256; ++t)
    all_right &= h[static_cast<size_t>(t)] == static_cast<float>((t + 1) % 256 + 1);
  expect_true("with __syncthreads() every thread reads its neighbour's value", all_right);
  {
    // With the checks off, the schedule still shows the race: threads run in a random order between
    // barriers, so about half read a slot not yet written (poisoned: NaN) instead of passing by luck.
    ScopedEnv off("GPUMAT_EMU_CHECKS", "none");
    RUN(neighbour_kernel<false>, 1, 256, 0, out);
    fetch();
    int wrong = 0;
    for (int t = 0; t < 256; ++t) wrong += h[static_cast<size_t>(t)] != static_cast<float>((t + 1) % 256 + 1);
    expect_true("without __syncthreads() the race shows (stale reads)", wrong > 16);
  }
  expect_error("lane 0 hands a value to its warp with __syncwarp()",
               RUN(warp_handoff_kernel<true>, 1, 256, 0, out), cudaSuccess, "no error");
  fetch();
  expect_true("every lane reads its lane 0's value", h[33] == 32.0f && h[255] == 224.0f);

  const float src_h[4] = {7.0f, 7.0f, 7.0f, 7.0f};
  GpuMatrix src({4}, Device::emu(0));
  src.copy_from_host(src_h, 4);
  expect_error("cp.async", RUN(cp_async_kernel, 1, 32, 0, static_cast<const float*>(src.data()), out),
               cudaSuccess, "no error");
  fetch();
  expect_true("cp.async lands at the wait, not before", h[0] == -1.0f && h[1] == 7.0f);
}

// ---------------------------------------------------------------------------- memcheck, racecheck, initcheck
// One planted bug per check, each reported with the kernel, block, thread and address; and the
// instrumentation's reach: an access of every kind one element past an array must reach memcheck.

// What access_kind_kernel does with the element just past `buf` (n floats).
enum AccessKind {
  kLoad1,
  kStore1,
  kLoad2,
  kStore2,
  kLoad4,
  kStore4,
  kLoad8,
  kStore8,
  kLoadFloat4,
  kStoreFloat4,
  kLoadDouble2,
  kStoreStruct,
  kLoadStruct,
  kAtomicAddFloat,
  kAtomicAddInt,
  kAtomicCas,
  kAtomicExch,
  kLdg,
  kVolatileLoad,
  kMemcpyTo,
  kMemcpyFrom,
  kMemset,
  kMemmove,
  kStdCopy,
  kStdFill,
  kAccessKinds
};
const char* const kAccessNames[] = {"1-byte load",
                                    "1-byte store",
                                    "2-byte load",
                                    "2-byte store",
                                    "float load",
                                    "float store",
                                    "double load",
                                    "double store",
                                    "float4 load",
                                    "float4 store",
                                    "double2 load",
                                    "struct store (48 bytes)",
                                    "struct load (48 bytes)",
                                    "atomicAdd(float)",
                                    "atomicAdd(int)",
                                    "atomicCAS",
                                    "atomicExch",
                                    "__ldg",
                                    "volatile load",
                                    "memcpy to",
                                    "memcpy from",
                                    "memset",
                                    "memmove",
                                    "std::copy",
                                    "std::fill"};
struct Twelve {
  float v[12];
};

__global__ void access_kind_kernel(int kind, float* buf, int n) {
  if (threadIdx.x != 0) return;
  char* past = reinterpret_cast<char*>(buf + n);  // the first byte past the array
  float* sink = buf;                              // in bounds: keeps every load alive
  switch (kind) {
    case kLoad1:
      sink[0] = *reinterpret_cast<const signed char*>(past);
      break;
    case kStore1:
      *past = 1;
      break;
    case kLoad2:
      sink[0] = *reinterpret_cast<const short*>(past);
      break;
    case kStore2:
      *reinterpret_cast<short*>(past) = 1;
      break;
    case kLoad4:
      sink[0] = *reinterpret_cast<const float*>(past);
      break;
    case kStore4:
      *reinterpret_cast<float*>(past) = 1.0f;
      break;
    case kLoad8:
      sink[0] = static_cast<float>(*reinterpret_cast<const double*>(past));
      break;
    case kStore8:
      *reinterpret_cast<double*>(past) = 1.0;
      break;
    case kLoadFloat4:
      sink[0] = reinterpret_cast<const float4*>(past)->w;
      break;
    case kStoreFloat4:
      *reinterpret_cast<float4*>(past) = make_float4(1, 2, 3, 4);
      break;
    case kLoadDouble2:
      sink[0] = static_cast<float>(reinterpret_cast<const double2*>(past)->y);
      break;
    case kStoreStruct:
      *reinterpret_cast<Twelve*>(past - 44) = Twelve{};
      break;  // its last float is past
    case kLoadStruct:
      *reinterpret_cast<Twelve*>(buf) = *reinterpret_cast<const Twelve*>(past - 44);
      break;
    case kAtomicAddFloat:
      atomicAdd(reinterpret_cast<float*>(past), 1.0f);
      break;
    case kAtomicAddInt:
      atomicAdd(reinterpret_cast<int*>(past), 1);
      break;
    case kAtomicCas:
      atomicCAS(reinterpret_cast<int*>(past), 0, 1);
      break;
    case kAtomicExch:
      atomicExch(reinterpret_cast<float*>(past), 1.0f);
      break;
    case kLdg:
      sink[0] = __ldg(reinterpret_cast<const float*>(past));
      break;
    case kVolatileLoad:
      sink[0] = *reinterpret_cast<const volatile float*>(past);
      break;
    case kMemcpyTo:
      std::memcpy(past - 8, buf, 12);
      break;  // 12 bytes: 4 past the end
    case kMemcpyFrom:
      std::memcpy(buf, past - 8, 12);
      break;
    case kMemset:
      std::memset(past - 4, 0, 8);
      break;
    case kMemmove:
      std::memmove(past - 4, buf, 8);
      break;
    case kStdCopy:
      std::copy(buf, buf + 3, reinterpret_cast<float*>(past) - 2);
      break;
    case kStdFill:
      std::fill(reinterpret_cast<float*>(past) - 1, reinterpret_cast<float*>(past) + 1, 0.0f);
      break;
  }
}

// Static shared memory indexed past its end (index from the host, so the compiler cannot see it).
__global__ void shared_index_kernel(float* out, int i) {
  __shared__ float tile[32];
  tile[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = tile[i];
}

__global__ void dynamic_smem_past_end_kernel(float* out, int floats) {
  float* s = static_cast<float*>(gpumat::emulator::dynamic_smem());
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[floats];  // one float past the launch's dynamic shared memory
}

__global__ void misaligned_float4_kernel(const float* in, float* out) {
  if (threadIdx.x != 0) return;
  const float4 v = *reinterpret_cast<const float4*>(in + 1);  // 4 bytes past 16-byte alignment
  out[0] = v.x + v.y + v.z + v.w;
}

// Racecheck in shared memory: two threads write one __shared__ scalar (a load-free flag) with no
// barrier between: the instrumentation sees scalar __shared__ variables too.
__global__ void shared_scalar_race_kernel(float* out) {
  __shared__ int flag;
  if (threadIdx.x < 2) flag = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = static_cast<float>(flag);
}

// A counter every block increments: with a plain read-modify-write (Atomic false), updates are lost
// on a GPU; racecheck reports the plain writes of two blocks to one address.
template <bool Atomic>
__global__ void block_counter_kernel(unsigned* counter) {
  if (threadIdx.x != 0) return;
  if (Atomic)
    atomicAdd(counter, 1u);
  else
    *counter = *counter + 1u;
}

// Reads an array nothing has written (initcheck), or a __shared__ slot this block did not write.
__global__ void read_kernel(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x]; }

__global__ void stale_shared_kernel(float* out) {
  __shared__ float tile[64];
  // Block 0 fills the whole tile, later blocks only half: the rest is what block 0 left, on the CPU.
  const int filled = blockIdx.x == 0 ? 64 : 32;
  if (static_cast<int>(threadIdx.x) < filled) tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = tile[threadIdx.x];
}

void check_cases() {
  const int n = 64;
  GpuMatrix arr({n}, Device::emu(0));
  float* buf = arr.data();
  std::vector<float> zeros(n, 0.0f), h(n);
  arr.copy_from_host(zeros.data(), n);
  for (int kind = 0; kind < kAccessKinds; ++kind) {
    const std::string what = std::string("memcheck sees a ") + kAccessNames[kind] + " past the end";
    expect_error(what.c_str(), RUN(access_kind_kernel, 1, 32, 0, kind, buf, n), cudaErrorLaunchFailure,
                 "bytes past the end of the 256-byte allocation");
  }
  expect_error("memcheck names kernel, block, thread and address",
               RUN(access_kind_kernel, dim3(1), dim3(32), 0, static_cast<int>(kStore4), buf, n),
               cudaErrorLaunchFailure,
               "kernel access_kind_kernel, block (0, 0, 0), thread (0, 0, 0): memcheck: invalid __global__ "
               "write of 4 bytes at 0x");
  expect_error("static __shared__ array index past its end", RUN(shared_index_kernel, 1, 32, 0, buf, 32),
               cudaErrorLaunchFailure, "index 32 out of bounds for type 'float [32]'");
  expect_error("in-bounds static __shared__ index", RUN(shared_index_kernel, 1, 32, 0, buf, 31), cudaSuccess,
               "no error");
  expect_error("dynamic shared memory past its end", RUN(dynamic_smem_past_end_kernel, 1, 32, 128, buf, 32),
               cudaErrorLaunchFailure, "outside the block's 128 bytes of dynamic shared memory");
  expect_error("misaligned float4 load",
               RUN(misaligned_float4_kernel, 1, 32, 0, static_cast<const float*>(buf), buf),
               cudaErrorLaunchFailure, "misaligned");

  expect_error("racecheck: two threads write a __shared__ scalar",
               RUN(shared_scalar_race_kernel, 1, 64, 0, buf), cudaErrorLaunchFailure,
               "write-after-write hazard on static shared memory");
  expect_error("racecheck: a read of a neighbour's __shared__ slot without __syncthreads()",
               RUN(neighbour_kernel<false>, 1, 256, 0, buf), cudaErrorLaunchFailure, "shared memory");
  expect_error("racecheck: a warp hand-off without __syncwarp()",
               RUN(warp_handoff_kernel<false>, 1, 256, 0, buf), cudaErrorLaunchFailure, "shared memory");
  GpuMatrix counter({1}, Device::emu(0));
  cudaMemsetAsync(counter.data(), 0, 4, stream0());
  auto* c = reinterpret_cast<unsigned*>(counter.data());
  expect_error("racecheck: blocks increment a counter with plain writes",
               RUN(block_counter_kernel<false>, 8, 32, 0, c), cudaErrorLaunchFailure,
               "plain writes to the same global memory");
  cudaMemsetAsync(counter.data(), 0, 4, stream0());
  expect_error("atomicAdd from every block", RUN(block_counter_kernel<true>, 8, 32, 0, c), cudaSuccess,
               "no error");
  unsigned count = 0;
  counter.copy_to_host(reinterpret_cast<float*>(&count), 1);
  expect_true("atomicAdd from 8 blocks counts 8", count == 8);

  GpuMatrix fresh({32}, Device::emu(0));
  expect_error("initcheck: a kernel reads memory nothing wrote",
               RUN(read_kernel, 1, 32, 0, static_cast<const float*>(fresh.data()), buf),
               cudaErrorLaunchFailure, "initcheck: read of 4 bytes of uninitialised device memory");
  GpuMatrix out128({128}, Device::emu(0));
  expect_error("initcheck: a stale __shared__ slot", RUN(stale_shared_kernel, 2, 64, 0, out128.data()),
               cudaErrorLaunchFailure, "that no thread of this block has written");
  {
    ScopedEnv off("GPUMAT_EMU_CHECKS", "memcheck,racecheck");
    GpuMatrix out2({128}, Device::emu(0));
    expect_error("stale __shared__ slot with initcheck off", RUN(stale_shared_kernel, 2, 64, 0, out2.data()),
                 cudaSuccess, "no error");
    std::vector<float> o(128);
    out2.copy_to_host(o.data(), 128);
    expect_true("static __shared__ memory is poisoned (NaN) in every block, not the last block's values",
                o[63] == 1.0f && std::isnan(o[64 + 63]) && o[64 + 31] == 1.0f);
  }
}

// ---------------------------------------------------------------------------- asynchronous streams

std::atomic<int> g_gate{0};
void wait_at_gate(void*) {
  while (g_gate.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value; }

// Launches return before the kernel runs: a host read without synchronizing sees the memory as it
// was (the stream is held back by a host function waiting at a gate, so this is not a timing bet).
void stream_cases() {
  const char* blocking = std::getenv("GPUMAT_EMU_LAUNCH_BLOCKING");
  if (blocking != nullptr && std::strcmp(blocking, "0") != 0) return;  // a gate would block the queueing call
  GpuMatrix arr({32}, Device::emu(0));
  std::vector<float> ones(32, 1.0f), h(32);
  arr.copy_from_host(ones.data(), 32);
  gpumat::synchronize(Device::emu(0));  // the copy has landed
  cudaStream_t s = stream0();
  g_gate = 0;
  expect_error("host function queued", cudaLaunchHostFunc(s, wait_at_gate, nullptr), cudaSuccess, "no error");
  expect_error("launch queued behind it",
               gpumat::emulator::launch_kernel(fill_kernel, "fill_kernel", 1, 32, 0, s, arr.data(), 5.0f),
               cudaSuccess, "no error");
  const float before = arr.data()[7];  // emulated device memory is host memory: read it unsynchronized
  expect_true("the stream is busy", cudaStreamQuery(s) == cudaErrorNotReady);
  g_gate = 1;
  expect_error("synchronize", cudaStreamSynchronize(s), cudaSuccess, "no error");
  arr.copy_to_host(h.data(), 32);
  expect_true("an unsynchronized read sees the memory before the kernel, a synchronized one after",
              before == 1.0f && h[7] == 5.0f);

  // A fault in a queued kernel is returned by the next synchronization, with its report.
  expect_error("a faulting kernel is queued",
               gpumat::emulator::launch_kernel(access_kind_kernel, "access_kind_kernel", 1, 32, 0, s,
                                               int{kStore4}, arr.data(), 32),
               cudaSuccess, "no error");
  expect_error("its fault comes with the synchronization", cudaStreamSynchronize(s), cudaErrorLaunchFailure,
               "memcheck");
  {
    ScopedEnv blocking("GPUMAT_EMU_LAUNCH_BLOCKING", "1");
    expect_error("GPUMAT_EMU_LAUNCH_BLOCKING=1: the launch returns the fault",
                 gpumat::emulator::launch_kernel(access_kind_kernel, "access_kind_kernel", 1, 32, 0, s,
                                                 int{kStore4}, arr.data(), 32),
                 cudaErrorLaunchFailure, "memcheck");
  }
  expect_error("nothing left to report", cudaStreamSynchronize(s), cudaSuccess, "no error");
}

// ---------------------------------------------------------------------------- CUDA graphs

__global__ void increment_kernel(float* out) { out[threadIdx.x] += 1.0f; }

// Stream capture records instead of running, a graph replays the record, and capture-unsafe calls
// (cudaStreamCaptureModeGlobal) fail and invalidate the capture, as on a GPU.
void graph_cases() {
  GpuMatrix arr({32}, Device::emu(0));
  float* out = arr.data();
  std::vector<float> h(32);
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto begin = [&] { return cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); };
  auto increment = [&](unsigned threads) {
    return gpumat::emulator::launch_kernel(increment_kernel, "increment_kernel", 1, threads, 0, s, out);
  };
  // Reads arr after the work queued on s (gpumat's copies run on another stream).
  auto fetch = [&] {
    cudaStreamSynchronize(s);
    arr.copy_to_host(h.data(), 32);
  };
  cudaGraph_t graph = nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;

  expect_error("capture of the legacy stream", cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
               cudaErrorStreamCaptureUnsupported, "legacy");
  expect_error("end without a capture", cudaStreamEndCapture(s, &graph), cudaErrorIllegalState,
               "not capturing");

  gpumat::synchronize(Device::emu(0));  // arr's allocation is in gpumat's stream order
  cudaMemsetAsync(out, 0, 32 * sizeof(float), s);
  expect_error("begin capture", begin(), cudaSuccess, "no error");
  expect_error("a second begin", begin(), cudaErrorIllegalState, "already capturing");
  cudaStreamIsCapturing(s, &status);
  expect_true("the stream reports an active capture", status == cudaStreamCaptureStatusActive);
  expect_error("captured launch 1", increment(32), cudaSuccess, "no error");
  expect_error("captured launch 2", increment(32), cudaSuccess, "no error");
  expect_error("end capture", cudaStreamEndCapture(s, &graph), cudaSuccess, "no error");
  fetch();
  expect_true("captured launches did not run", h[0] == 0.0f && h[31] == 0.0f);
  size_t nodes = 0;
  cudaGraphGetNodes(graph, nullptr, &nodes);
  expect_true("the graph holds the two launches", nodes == 2);
  cudaGraphExec_t exec = nullptr;
  expect_error("instantiate", cudaGraphInstantiate(&exec, graph, 0), cudaSuccess, "no error");
  for (int i = 0; i < 3; ++i) cudaGraphLaunch(exec, s);
  fetch();
  expect_true("three graph launches made six increments", h[0] == 6.0f && h[31] == 6.0f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  expect_error("launch of a destroyed graph", cudaGraphLaunch(exec, s), cudaErrorInvalidResourceHandle,
               "invalid graph exec");

  struct Unsafe {
    const char* name;
    std::function<cudaError_t()> call;
  };
  void* p = nullptr;
  const Unsafe unsafe[] = {
      {"cudaMalloc", [&] { return cudaMalloc(&p, 256); }},
      {"cudaStreamSynchronize", [&] { return cudaStreamSynchronize(s); }},
      {"cudaMemcpy", [&] { return cudaMemcpy(h.data(), out, 4, cudaMemcpyDeviceToHost); }},
      {"cudaDeviceSynchronize", [&] { return cudaDeviceSynchronize(); }},
  };
  for (const Unsafe& u : unsafe) {
    begin();
    increment(32);
    expect_error(u.name, u.call(), cudaErrorStreamCaptureUnsupported,
                 "not allowed while a stream is being captured");
    cudaStreamIsCapturing(s, &status);
    expect_true("an unsafe call invalidates the capture", status == cudaStreamCaptureStatusInvalidated);
    expect_error("end of an invalidated capture", cudaStreamEndCapture(s, &graph),
                 cudaErrorStreamCaptureInvalidated, u.name);
    expect_true("no graph from an invalidated capture", graph == nullptr);
  }
  begin();
  expect_error("bad configuration while capturing", increment(2048), cudaErrorInvalidConfiguration,
               "1024 threads");
  expect_error("end after a bad launch", cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated,
               "1024 threads");
  cudaStreamIsCapturing(s, &status);
  expect_true("the stream is no longer capturing", status == cudaStreamCaptureStatusNone);
  fetch();
  expect_true("nothing ran during the failed captures", h[0] == 6.0f);
  cudaStreamDestroy(s);
}

// ---------------------------------------------------------------------------- sanitizer demos
// Deliberately wrong kernels: under `make emu-sanitize` (AddressSanitizer, no emulator checks) each
// must end the process with a report that names it. They are launched straight through the emulator
// (they are not part of libgpumat).

__global__ void oob_global_kernel(float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  out[i + n] = 1.0f;  // one block too far: writes past the array
}

__global__ void oob_shared_kernel(float* out) {
  __shared__ float tile[32];
  tile[threadIdx.x + 1] = static_cast<float>(threadIdx.x);  // thread 31 writes tile[32]
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

int run_demo(const std::string& which) {
  GpuMatrix arr({32}, Device::emu(0));
  cudaError_t err;
  if (which == "--oob-global")
    err = RUN(oob_global_kernel, dim3(1), dim3(32), 0, arr.data(), 32);
  else
    err = RUN(oob_shared_kernel, dim3(1), dim3(32), 0, arr.data());
  std::printf("the bad kernel ran to the end (%s): the sanitizer did not catch it\n", cudaGetErrorName(err));
  return 3;
}

}  // namespace

// index_select, index_add, index_copy along the first, middle and last dims; the index comes from
// argmax of random rows (integers in [0, n), repeats likely), shifted to reach negative rows and
// doubled to reach rows out of range (NaN output / skipped). index_add's many buckets and long
// index list reach the bucketed scan's every branch.
void index_cases() {
  namespace ops = gpumat::ops;
  struct Case {
    Shape shape;
    int64_t dim, len;
  };
  const Case cases[] = {{{7, 33, 5}, 1, 40}, {{300, 3}, 0, 1000},  {{4, 9}, -1, 7},
                        {{2, 3, 1}, 2, 3},   {{5000, 2}, 0, 3000}, {{1, 1}, 0, 0}};
  for (const Case& c : cases) {
    const int64_t a = c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim;
    const int64_t n = c.shape[static_cast<size_t>(a)], len = c.len;
    Shape part = c.shape;
    part[static_cast<size_t>(a)] = len;
    std::string t = " (";
    for (int64_t k : c.shape) t += std::to_string(k) + ",";
    t += ") dim=" + std::to_string(c.dim) + " len=" + std::to_string(len);
    const int64_t d = c.dim;
    // a[0] x, a[1] (len, n) rows for argmax, a[2] src; outputs: index, shifted index, the three results
    auto index_of = [n](GpuMatrix& rows, GpuMatrix& idx, GpuMatrix& shifted) {
      ops::argmax(rows, idx, 1);
      ops::mul_scalar(idx, 1.5f, shifted);  // halves are not whole numbers: they name no row
      ops::add_scalar(shifted, -static_cast<float>(n / 2), shifted);
    };
    check(
        "index_select" + t, {c.shape, {len, n}}, {{len}, {len}, part, part},
        [d, index_of](Arrays& v) {
          index_of(v[1], v[2], v[3]);
          ops::index_select(v[0], d, v[2], v[4]);
          ops::index_select(v[0], d, v[3], v[5]);
        },
        0.0f);
    check(
        "index_add/index_copy" + t, {c.shape, {len, n}, part, c.shape}, {{len}, {len}, c.shape, c.shape},
        [d, index_of](Arrays& v) {
          index_of(v[1], v[4], v[5]);
          ops::copy(v[0], v[6]);
          ops::index_add(v[6], d, v[4], v[2], 0.5f);
          ops::index_add(v[6], d, v[5], v[2], 1.0f);
          ops::copy(v[3], v[7]);
          ops::index_copy(v[7], d, v[4], v[2]);
          ops::index_copy(v[7], d, v[5], v[2]);
        },
        0.0f);
  }
}

// The norm family: layer norm and RMS norm over rows (one value, a warp's tail, several warps per
// row, more rows than blocks), batch norm per channel (more channels than blocks, long channels);
// each device's statistics feed its own gradients. Run again with two blocks per grid, so every
// grid-stride loop over rows and channels takes several laps.
void norm_cases_once() {
  namespace ops = gpumat::ops;
  for (auto [r, d] : {std::pair<int64_t, int64_t>{1, 1}, {5, 33}, {7, 100}, {3, 1000}, {70, 16}}) {
    for (bool rms : {false, true}) {
      const std::string t = " " + dims({r, d}) + (rms ? " rms" : "");
      check(
          "layer_norm" + t, {{r, d}, {d}, {d}}, {{r, d}},
          [rms](Arrays& a) { ops::layer_norm(a[0], a[1], a[2], a[3], 1e-3f, rms); }, 1e-4f);
      check(
          "layer_norm_stats/gradients" + t, {{r, d}, {d}, {r, d}}, {{r, 2}, {r, d}, {d}},
          [rms](Arrays& a) {
            ops::layer_norm_stats(a[0], a[3], 1e-3f, rms);
            ops::layer_norm_gradient(a[0], a[3], a[1], a[2], a[4], rms);
            ops::layer_norm_weight_gradient(a[0], a[3], a[2], a[5]);
          },
          1e-4f);
      check(
          "layer_norm_backward" + t, {{r, d}, {d}, {r, d}}, {{r, d}, {d}, {d}},
          [rms](Arrays& a) { ops::layer_norm_backward(a[0], a[1], a[2], a[3], a[4], a[5], 1e-3f, rms); },
          1e-4f);
    }
  }
  for (const Shape& x : {Shape{2, 3}, Shape{5, 4, 7}, Shape{3, 2, 300}, Shape{4, 70, 2}}) {
    const int64_t c = x[1];
    const std::string t = " " + dims(x);
    check(
        "batch_norm" + t, {x, {c}, {c}, x}, {{c, 2}, x, x, x, {c}},
        [](Arrays& a) {
          ops::batch_norm_stats(a[0], a[4]);
          ops::batch_norm(a[0], a[4], a[1], a[2], a[5], 1e-3f);
          ops::batch_norm_gradient(a[0], a[4], a[1], a[3], a[6], 1e-3f, true);
          ops::batch_norm_gradient(a[0], a[4], a[1], a[3], a[7], 1e-3f, false);
          ops::batch_norm_weight_gradient(a[0], a[4], a[3], a[8], 1e-3f);
        },
        1e-4f);
  }
}

void norm_cases() {
  norm_cases_once();
  ScopedEnv cap("GPUMAT_EMU_MAX_BLOCKS", "2");
  g_setting = " (GPUMAT_EMU_MAX_BLOCKS=2)";
  norm_cases_once();
  g_setting.clear();
}

// ---------------------------------------------------------------------------- attention
// The fused attention kernels (forward, and the gradient's two passes) against the host kernel:
// tails of the 16-row tiles in l and s (l != s either way), one row and one key, e != ev, the
// largest head dim (128), causal and not, a batch of several (batch, head) pairs; and a grid of
// GPUMAT_EMU_MAX_BLOCKS=2 (the grid-stride loop over tiles); s = 130 gives dq three atomic adds per
// element. The gradient runs on the forward's output of its own device (the saved logsumexp).
void attention_cases() {
  namespace ops = gpumat::ops;
  struct Case {
    int64_t batch, l, s, e, ev;
  };
  for (const Case& c : {Case{3, 37, 21, 5, 7}, Case{2, 16, 40, 8, 8}, Case{1, 1, 1, 1, 1},
                        Case{2, 19, 17, 128, 128}, Case{1, 33, 33, 3, 2}, Case{2, 70, 130, 24, 16}}) {
    for (bool causal : {false, true}) {
      const std::string t = " (" + std::to_string(c.batch) + "," + std::to_string(c.l) + "," +
                            std::to_string(c.s) + "," + std::to_string(c.e) + "," + std::to_string(c.ev) +
                            (causal ? ") causal" : ")");
      const Shape q{c.batch, c.l, c.e}, k{c.batch, c.s, c.e}, v{c.batch, c.s, c.ev},
          o{c.batch, c.l, c.ev + 1};
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.e));
      check(
          "attention" + t, {q, k, v}, {o},
          [scale, causal](Arrays& a) { ops::attention(a[0], a[1], a[2], a[3], scale, causal); }, 1e-5f, -2.0f,
          2.0f);
      // both gradient paths: dq by float atomics (the default) and the deterministic two kernels
      for (bool deterministic : {false, true}) {
        ops::use_deterministic_algorithms(deterministic);
        check(
            "attention_gradient" + t + (deterministic ? " deterministic" : ""), {q, k, v, o},
            {{c.batch * (c.l * c.e + c.s * c.e + c.s * c.ev)}},
            [scale, causal, o](Arrays& a) {
              GpuMatrix out(o, a[0].device());
              ops::attention(a[0], a[1], a[2], out, scale, causal);
              ops::attention_gradient(a[0], a[1], a[2], out, a[3], a[4], scale, causal);
            },
            1e-4f, -2.0f, 2.0f);
      }
      ops::use_deterministic_algorithms(false);
    }
  }
  // q, k, v read in place from one (b, t, 3 (h d + gap)) projection (a GPT's heads, a gap column
  // after each block: the gradient's zeros), the gradient written in their place; dq's atomic
  // path clears a strided region first (zero_rows_kernel)
  for (bool causal : {false, true}) {
    constexpr int64_t b = 2, t = 70, h = 3, d = 8, block = h * d + 1, width = 3 * block;
    const Shape x{b, t, width}, o{b * h, t, d + 1};
    const auto forward = [causal](const GpuMatrix& qkv, GpuMatrix& out) {
      ops::attention_strided(qkv, out, h, t, t, d, d, 0, block, 2 * block, t * width, d, width, 0.5f, causal);
    };
    const std::string c = causal ? " causal" : "";
    check(
        "attention_strided" + c, {x}, {o}, [forward](Arrays& a) { forward(a[0], a[1]); }, 1e-5f, -2.0f, 2.0f);
    for (bool deterministic : {false, true}) {
      ops::use_deterministic_algorithms(deterministic);
      check(
          "attention_strided_gradient" + c + (deterministic ? " deterministic" : ""), {x, o}, {x},
          [forward, causal, o](Arrays& a) {
            GpuMatrix out(o, a[0].device());
            forward(a[0], out);
            ops::attention_strided_gradient(a[0], out, a[1], a[2], h, t, t, d, d, 0, block, 2 * block,
                                            t * width, d, width, 0.5f, causal);
          },
          1e-4f, -2.0f, 2.0f);
    }
    ops::use_deterministic_algorithms(false);
  }
  ScopedEnv cap("GPUMAT_EMU_MAX_BLOCKS", "2");
  g_setting = " (GPUMAT_EMU_MAX_BLOCKS=2)";
  const Shape q{4, 35, 6}, k{4, 18, 6}, v{4, 18, 3}, o{4, 35, 4};
  check("attention", {q, k, v}, {o}, [](Arrays& a) { ops::attention(a[0], a[1], a[2], a[3], 0.5f, true); });
  check("attention_gradient", {q, k, v, o}, {{4 * (35 * 6 + 18 * 6 + 18 * 3)}}, [o](Arrays& a) {
    GpuMatrix out(o, a[0].device());
    ops::attention(a[0], a[1], a[2], out, 0.5f, false);
    ops::attention_gradient(a[0], a[1], a[2], out, a[3], a[4], 0.5f, false);
  });
  g_setting.clear();
}

int main(int argc, char** argv) {
  if (argc > 1) return run_demo(argv[1]);
  try {
    elementwise_cases();
    layout_cases();
    strided_cases();
    matmul_cases();
    sort_cases();
    fused_cases();
    conv_pool_cases();
    emulator_cases();
    if (gpumat::emulator::checks_compiled()) check_cases();
    stream_cases();
    graph_cases();
    layer_cases();
    size_cases();
    frontend_kernel_cases();
    numerics_cases();
    grid_stride_cases();
    index_cases();
    norm_cases();
    rnn_cases();
    attention_cases();
  } catch (const std::exception& e) {  // a fault outside the cases' own checks
    std::printf("FAIL (uncaught): %s\n", e.what());
    ++g_failures;
  }
  std::printf("%d cases on emu:0 against the host: %d failed\n", g_cases, g_failures);
  return g_failures ? 1 : 0;
}
