// CUDA rnn family: the fused recurrent cells. Host reference: ../host/rnn.cpp. The arithmetic of
// one (row, column) element is ../rnn_cell.h's (shared with the host): lstm_cell, gru_cell and
// their gradients, gate blocks in PyTorch's order. Grid-stride, one thread per element of the
// (n, h) state; each thread writes its element of every output block.
#include "../rnn_cell.h"
#include "common.cuh"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {

// Kind 0 lstm_cell, 1 lstm_cell_gradient, 2 gru_cell, 3 gru_cell_gradient; a, b, c, d the inputs
// in the kernels' order (unused ones null).
template <int Kind>
__global__ void rnn_cell_kernel(const float* a, const float* b, const float* c, const float* d, float* out,
                                int64_t n, int64_t h) {
  const int64_t total = n * h;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / h, j = i % h;
    if (Kind == 0) rnn_cell::lstm(a, b, out, r, j, h);
    if (Kind == 1) rnn_cell::lstm_gradient(a, b, c, d, out, r, j, h);
    if (Kind == 2) rnn_cell::gru(a, b, c, out, r, j, h);
    if (Kind == 3) rnn_cell::gru_gradient(a, b, c, d, out, r, j, h);
  }
}

template <int Kind>
void launch_cell(const char* op, int dev, const float* a, const float* b, const float* c, const float* d,
                 float* out, int64_t n, int64_t h) {
  cudaStream_t stream = activate(dev);
  launch<rnn_cell_kernel<Kind>>(op, grid_for(n * h, kBlockSize), kBlockSize, 0, stream, a, b, c, d, out, n,
                                h);
}

}  // namespace

void lstm_cell(int dev, const float* gates, const float* c, float* out, int64_t n, int64_t h) {
  launch_cell<0>("lstm_cell", dev, gates, c, nullptr, nullptr, out, n, h);
}

void lstm_cell_gradient(int dev, const float* gates, const float* c, const float* y, const float* dy,
                        float* out, int64_t n, int64_t h) {
  launch_cell<1>("lstm_cell_gradient", dev, gates, c, y, dy, out, n, h);
}

void gru_cell(int dev, const float* gi, const float* gh, const float* hx, float* out, int64_t n, int64_t h) {
  launch_cell<2>("gru_cell", dev, gi, gh, hx, nullptr, out, n, h);
}

void gru_cell_gradient(int dev, const float* gi, const float* gh, const float* hx, const float* dy,
                       float* out, int64_t n, int64_t h) {
  launch_cell<3>("gru_cell_gradient", dev, gi, gh, hx, dy, out, n, h);
}

}  // namespace gpumat::GPUMAT_CUDA_NS
