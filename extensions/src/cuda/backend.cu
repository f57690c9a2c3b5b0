// The CUDA function table. Fields are assigned by name so that adding an entry cannot shift others.
#include "../backend.h"
#include "kernels.cuh"

namespace gpumat {

const Backend& cuda_backend() {
  static const Backend table = [] {
    Backend t{};
    t.array_set = cuda::array_set;
    t.broadcast_to = cuda::broadcast_to;
    t.reduce_sum_axis_zero = cuda::reduce_sum_axis_zero;
    t.add = cuda::add;
    t.multiply = cuda::multiply;
    t.add_const = cuda::add_const;
    t.multiply_const = cuda::multiply_const;
    t.matmul = cuda::matmul;
    t.relu = cuda::relu;
    t.relu_gradient = cuda::relu_gradient;
    t.softmax = cuda::softmax;
    t.softmax_cross_entropy = cuda::softmax_cross_entropy;
    t.transpose = cuda::transpose;
    t.random_uniform = cuda::random_uniform;
    t.random_normal = cuda::random_normal;
    t.axpy = cuda::axpy;
    t.copy = cuda::copy;
    t.conv2d = cuda::conv2d;
    t.conv2d_gradient_input = cuda::conv2d_gradient_input;
    t.conv2d_gradient_filter = cuda::conv2d_gradient_filter;
    t.add_channel_bias = cuda::add_channel_bias;
    t.reduce_sum_channels = cuda::reduce_sum_channels;
    t.max_pool2d = cuda::max_pool2d;
    t.max_pool2d_gradient = cuda::max_pool2d_gradient;
    t.avg_pool2d = cuda::avg_pool2d;
    t.avg_pool2d_gradient = cuda::avg_pool2d_gradient;
    t.mse_loss = cuda::mse_loss;
    t.mae_loss = cuda::mae_loss;
    t.mse_loss_gradient = cuda::mse_loss_gradient;
    t.mae_loss_gradient = cuda::mae_loss_gradient;
    t.adam_update = cuda::adam_update;
    return t;
  }();
  return table;
}

}  // namespace gpumat
