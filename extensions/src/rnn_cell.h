// The fused recurrent-cell arithmetic shared by the host and CUDA rnn kernels, one (row r,
// column j) element of the hidden size h per call, so both devices compute it from one definition.
// Gate blocks are rows of G*h columns in PyTorch's order (LSTM i, f, g, o; GRU r, z, n):
//   lstm_cell: c' = s(f) c + s(i) tanh(g), h' = s(o) tanh(c'); out (n, 2h) = [h' | c']
//   lstm_cell_gradient from dy (n, 2h) = [dh' | dc']: dC = dc' + dh' s(o) (1 - tanh(c')^2);
//     out (n, 5h) = [d gates (i, f, g, o) | dc] with di = dC tanh(g) s(i)(1 - s(i)),
//     df = dC c s(f)(1 - s(f)), dg = dC s(i)(1 - tanh(g)^2), do = dh' tanh(c') s(o)(1 - s(o)),
//     dc = dC s(f)
//   gru_cell (gi = x W_ih^T + b_ih, gh = h W_hh^T + b_hh): r = s(gi_r + gh_r),
//     z = s(gi_z + gh_z), nn = tanh(gi_n + r gh_n), h' = nn + z (h - nn); out (n, h)
//   gru_cell_gradient from dy (n, h): out (n, 7h) = [d gi (r, z, n) | d gh (r, z, n) | dh] with
//     dN = dy (1 - z)(1 - nn^2), dZ = dy (h - nn) z (1 - z), dR = dN gh_n r (1 - r),
//     d gi = (dR, dZ, dN), d gh = (dR, dZ, dN r), dh = dy z
// s is the sigmoid through exp(-|x|) (activation.cu's), so it never overflows. The sigmoid and
// tanh come from a policy M: LibMath (the C library's expf and tanhf) by default and on CUDA; the
// host kernels pass vec_math.h's SIMD functions (host/rnn.cpp), float32 rounding apart.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace gpumat::rnn_cell {

struct LibMath {
  GPUMAT_HD_INLINE static float sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
  }
  GPUMAT_HD_INLINE static float tanh(float x) { return tanhf(x); }
};

template <typename M = LibMath>
GPUMAT_HD_INLINE void lstm(const float* gates, const float* c, float* out, int64_t r, int64_t j, int64_t h) {
  const float* g = gates + r * 4 * h;
  const float si = M::sigmoid(g[j]), sf = M::sigmoid(g[h + j]), tg = M::tanh(g[2 * h + j]),
              so = M::sigmoid(g[3 * h + j]);
  const float cn = sf * c[r * h + j] + si * tg;
  out[r * 2 * h + j] = so * M::tanh(cn);
  out[r * 2 * h + h + j] = cn;
}

template <typename M = LibMath>
GPUMAT_HD_INLINE void lstm_gradient(const float* gates, const float* c, const float* y, const float* dy,
                                    float* out, int64_t r, int64_t j, int64_t h) {
  const float* g = gates + r * 4 * h;
  const float si = M::sigmoid(g[j]), sf = M::sigmoid(g[h + j]), tg = M::tanh(g[2 * h + j]),
              so = M::sigmoid(g[3 * h + j]);
  const float tc = M::tanh(y[r * 2 * h + h + j]);
  const float dh = dy[r * 2 * h + j];
  const float dc = dy[r * 2 * h + h + j] + dh * so * (1.0f - tc * tc);
  float* o = out + r * 5 * h;
  o[j] = dc * tg * si * (1.0f - si);
  o[h + j] = dc * c[r * h + j] * sf * (1.0f - sf);
  o[2 * h + j] = dc * si * (1.0f - tg * tg);
  o[3 * h + j] = dh * tc * so * (1.0f - so);
  o[4 * h + j] = dc * sf;
}

template <typename M = LibMath>
GPUMAT_HD_INLINE void gru(const float* gi, const float* gh, const float* hx, float* out, int64_t r, int64_t j,
                          int64_t h) {
  const float* a = gi + r * 3 * h;
  const float* b = gh + r * 3 * h;
  const float rr = M::sigmoid(a[j] + b[j]), z = M::sigmoid(a[h + j] + b[h + j]);
  const float nn = M::tanh(a[2 * h + j] + rr * b[2 * h + j]);
  out[r * h + j] = nn + z * (hx[r * h + j] - nn);
}

template <typename M = LibMath>
GPUMAT_HD_INLINE void gru_gradient(const float* gi, const float* gh, const float* hx, const float* dy,
                                   float* out, int64_t r, int64_t j, int64_t h) {
  const float* a = gi + r * 3 * h;
  const float* b = gh + r * 3 * h;
  const float rr = M::sigmoid(a[j] + b[j]), z = M::sigmoid(a[h + j] + b[h + j]);
  const float nn = M::tanh(a[2 * h + j] + rr * b[2 * h + j]);
  const float d = dy[r * h + j], hv = hx[r * h + j];
  const float dn = d * (1.0f - z) * (1.0f - nn * nn);
  const float dz = d * (hv - nn) * z * (1.0f - z);
  const float dr = dn * b[2 * h + j] * rr * (1.0f - rr);
  float* o = out + r * 7 * h;
  o[j] = dr;
  o[h + j] = dz;
  o[2 * h + j] = dn;
  o[3 * h + j] = dr;
  o[4 * h + j] = dz;
  o[5 * h + j] = dn * rr;
  o[6 * h + j] = d * z;
}

}  // namespace gpumat::rnn_cell
