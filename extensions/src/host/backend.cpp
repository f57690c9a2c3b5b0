// The host function table. Fields are assigned by name so that adding an entry cannot shift others.
#include "../backend.h"

#include "kernels.h"

namespace gpumat {

const Backend& host_backend() {
  static const Backend table = [] {
    Backend t{};
    t.array_set = host::array_set;
    t.broadcast_to = host::broadcast_to;
    t.reduce_sum_axis_zero = host::reduce_sum_axis_zero;
    t.add = host::add;
    t.multiply = host::multiply;
    t.add_const = host::add_const;
    t.multiply_const = host::multiply_const;
    t.matmul = host::matmul;
    t.relu = host::relu;
    t.relu_gradient = host::relu_gradient;
    t.softmax = host::softmax;
    t.softmax_cross_entropy = host::softmax_cross_entropy;
    t.transpose = host::transpose;
    t.random_uniform = host::random_uniform;
    t.random_normal = host::random_normal;
    t.axpy = host::axpy;
    t.copy = host::copy;
    t.conv2d = host::conv2d;
    t.conv2d_gradient_input = host::conv2d_gradient_input;
    t.conv2d_gradient_filter = host::conv2d_gradient_filter;
    t.add_channel_bias = host::add_channel_bias;
    t.reduce_sum_channels = host::reduce_sum_channels;
    t.max_pool2d = host::max_pool2d;
    t.max_pool2d_gradient = host::max_pool2d_gradient;
    t.avg_pool2d = host::avg_pool2d;
    t.avg_pool2d_gradient = host::avg_pool2d_gradient;
    t.mse_loss = host::mse_loss;
    t.mae_loss = host::mae_loss;
    t.mse_loss_gradient = host::mse_loss_gradient;
    t.mae_loss_gradient = host::mae_loss_gradient;
    t.matmul_bias = host::matmul_bias;
    t.relu_bias_gradient = host::relu_bias_gradient;
    t.softmax_cross_entropy_with_gradient = host::softmax_cross_entropy_with_gradient;
    t.sgd_update_multi = host::sgd_update_multi;
    t.momentum_sgd_update_multi = host::momentum_sgd_update_multi;
    t.adam_update_multi = host::adam_update_multi;
    t.adam_update = host::adam_update;
    t.softmax_axis = host::softmax_axis;
    t.softmax_axis_gradient = host::softmax_axis_gradient;
    t.nll_loss = host::nll_loss;
    t.nll_loss_gradient = host::nll_loss_gradient;
    t.tanh = host::tanh;
    t.sigmoid = host::sigmoid;
    t.tanh_gradient = host::tanh_gradient;
    t.sigmoid_gradient = host::sigmoid_gradient;
    t.dropout = host::dropout;
    t.reduce_axis = host::reduce_axis;
    t.broadcast_axis = host::broadcast_axis;
    t.reduce_max_gradient = host::reduce_max_gradient;
    return t;
  }();
  return table;
}

}  // namespace gpumat
