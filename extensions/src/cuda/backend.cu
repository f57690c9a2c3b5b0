// The CUDA function table (the emulated device's too: see common.cuh). Fields are assigned by name
// so that adding an entry cannot shift others.
#include "../backend.h"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

const Backend& backend() {
  static const Backend table = [] {
    Backend t{};
    t.array_set = GPUMAT_CUDA_NS::array_set;
    t.broadcast_to = GPUMAT_CUDA_NS::broadcast_to;
    t.reduce_sum_axis_zero = GPUMAT_CUDA_NS::reduce_sum_axis_zero;
    t.add = GPUMAT_CUDA_NS::add;
    t.multiply = GPUMAT_CUDA_NS::multiply;
    t.add_const = GPUMAT_CUDA_NS::add_const;
    t.multiply_const = GPUMAT_CUDA_NS::multiply_const;
    t.matmul = GPUMAT_CUDA_NS::matmul;
    t.relu = GPUMAT_CUDA_NS::relu;
    t.relu_gradient = GPUMAT_CUDA_NS::relu_gradient;
    t.softmax = GPUMAT_CUDA_NS::softmax;
    t.softmax_cross_entropy = GPUMAT_CUDA_NS::softmax_cross_entropy;
    t.transpose = GPUMAT_CUDA_NS::transpose;
    t.random_uniform = GPUMAT_CUDA_NS::random_uniform;
    t.random_normal = GPUMAT_CUDA_NS::random_normal;
    t.axpy = GPUMAT_CUDA_NS::axpy;
    t.copy = GPUMAT_CUDA_NS::copy;
    t.conv2d = GPUMAT_CUDA_NS::conv2d;
    t.conv2d_gradient_input = GPUMAT_CUDA_NS::conv2d_gradient_input;
    t.conv2d_gradient_filter = GPUMAT_CUDA_NS::conv2d_gradient_filter;
    t.add_channel_bias = GPUMAT_CUDA_NS::add_channel_bias;
    t.reduce_sum_channels = GPUMAT_CUDA_NS::reduce_sum_channels;
    t.max_pool2d = GPUMAT_CUDA_NS::max_pool2d;
    t.max_pool2d_gradient = GPUMAT_CUDA_NS::max_pool2d_gradient;
    t.avg_pool2d = GPUMAT_CUDA_NS::avg_pool2d;
    t.avg_pool2d_gradient = GPUMAT_CUDA_NS::avg_pool2d_gradient;
    t.mse_loss = GPUMAT_CUDA_NS::mse_loss;
    t.mae_loss = GPUMAT_CUDA_NS::mae_loss;
    t.mse_loss_gradient = GPUMAT_CUDA_NS::mse_loss_gradient;
    t.mae_loss_gradient = GPUMAT_CUDA_NS::mae_loss_gradient;
    t.matmul_bias = GPUMAT_CUDA_NS::matmul_bias;
    t.relu_bias_gradient = GPUMAT_CUDA_NS::relu_bias_gradient;
    t.softmax_cross_entropy_with_gradient = GPUMAT_CUDA_NS::softmax_cross_entropy_with_gradient;
    t.sgd_update_multi = GPUMAT_CUDA_NS::sgd_update_multi;
    t.momentum_sgd_update_multi = GPUMAT_CUDA_NS::momentum_sgd_update_multi;
    t.adam_update_multi = GPUMAT_CUDA_NS::adam_update_multi;
    t.adam_update = GPUMAT_CUDA_NS::adam_update;
    t.softmax_axis = GPUMAT_CUDA_NS::softmax_axis;
    t.softmax_axis_gradient = GPUMAT_CUDA_NS::softmax_axis_gradient;
    t.nll_loss = GPUMAT_CUDA_NS::nll_loss;
    t.nll_loss_gradient = GPUMAT_CUDA_NS::nll_loss_gradient;
    t.tanh = GPUMAT_CUDA_NS::tanh;
    t.sigmoid = GPUMAT_CUDA_NS::sigmoid;
    t.tanh_gradient = GPUMAT_CUDA_NS::tanh_gradient;
    t.sigmoid_gradient = GPUMAT_CUDA_NS::sigmoid_gradient;
    t.dropout = GPUMAT_CUDA_NS::dropout;
    t.reduce_axis = GPUMAT_CUDA_NS::reduce_axis;
    t.broadcast_axis = GPUMAT_CUDA_NS::broadcast_axis;
    t.reduce_max_gradient = GPUMAT_CUDA_NS::reduce_max_gradient;
    return t;
  }();
  return table;
}

}  // namespace gpumat::GPUMAT_CUDA_NS
