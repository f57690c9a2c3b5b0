// Host rnn family (the reference for ../cuda/rnn.cu): the fused recurrent cells, one (row, column)
// element of the (n, h) state at a time with ../rnn_cell.h's arithmetic (the CUDA kernels'),
// parallel over the elements.
#include "../rnn_cell.h"
#include "kernels.h"
#include "parallel.h"

namespace gpumat::host {

void lstm_cell(int, const float* gates, const float* c, float* out, int64_t n, int64_t h) {
  parallel_for(n * h, n * h * 8, [&](int64_t i) { rnn_cell::lstm(gates, c, out, i / h, i % h, h); });
}

void lstm_cell_gradient(int, const float* gates, const float* c, const float* y, const float* dy, float* out,
                        int64_t n, int64_t h) {
  parallel_for(n * h, n * h * 12,
               [&](int64_t i) { rnn_cell::lstm_gradient(gates, c, y, dy, out, i / h, i % h, h); });
}

void gru_cell(int, const float* gi, const float* gh, const float* hx, float* out, int64_t n, int64_t h) {
  parallel_for(n * h, n * h * 8, [&](int64_t i) { rnn_cell::gru(gi, gh, hx, out, i / h, i % h, h); });
}

void gru_cell_gradient(int, const float* gi, const float* gh, const float* hx, const float* dy, float* out,
                       int64_t n, int64_t h) {
  parallel_for(n * h, n * h * 12,
               [&](int64_t i) { rnn_cell::gru_gradient(gi, gh, hx, dy, out, i / h, i % h, h); });
}

}  // namespace gpumat::host
