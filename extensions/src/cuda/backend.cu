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
    return t;
  }();
  return table;
}

}  // namespace gpumat
