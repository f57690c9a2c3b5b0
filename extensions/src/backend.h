// The function table every device implements (host: src/host/<family>.cpp; CUDA and the emulated
// device: src/cuda/<family>.cu), after CMU needle's backends: one table per device exporting the
// same list, kernels.def, so src/ops/ never branches on the device. The geometry structs of the
// window ops come first, as kernels.def's conv and pool entries take them.
#pragma once

#include <cstdint>

#include "gpumat/device.h"
#include "host_device.h"
#include "strided.h"  // strided::Iter, the strided kernels' index spaces

namespace gpumat {

// Geometry of a 2-D convolution (cross-correlation, zero padding): x is (n, c, h, w), the filter w
// is (f, c, kh, kw), y is (n, f, oh, ow) with oh = (h + 2*pad_h - kh) / stride_h + 1 (likewise ow).
// conv1d is the case h = kh = 1, stride_h = 1, pad_h = 0. `chunk` is the number of images whose
// im2col columns are built at once (1 <= chunk <= n), chosen by ops/conv.cpp so the scratch buffers
// stay under the workspace limit (set_conv_workspace_limit).
struct ConvShape {
  int64_t n, c, h, w;
  int64_t f, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w;
  int64_t oh, ow;
  int64_t chunk;
};

// Geometry of 2-D pooling over `planes` = N*C independent (h, w) planes: x is (planes, h, w), y is
// (planes, oh, ow) with oh = (h + 2*pad_h - kh) / stride_h + 1 (likewise ow). ops/pool.cpp guarantees
// pad <= kernel / 2, so every window holds at least one element of x.
struct PoolShape {
  int64_t planes, h, w;
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w;
  int64_t oh, ow;
};

// Where the rows of one operand of attention lie: the operand is `batch` head-batches of (rows, dim),
// head-batch i = b * heads + h starting at b * batch_stride + h * head_stride elements from the
// operand's pointer, its row r row_stride elements after that, each row's dim elements contiguous.
// A contiguous (batch, rows, dim) array is {1, rows * dim, 0, dim}; the heads of
// x.view(B, T, H, D).transpose(1, 2) over a (B, T, C) x with row length C are {H, T * C, D, C}.
struct HeadLayout {
  int64_t heads, batch_stride, head_stride, row_stride;
  GPUMAT_HD int64_t start(int64_t i) const { return (i / heads) * batch_stride + (i % heads) * head_stride; }
};

// The function table every device implements, one field per line of kernels.def.
struct Backend {
#define GPUMAT_KERNEL(name, params) void(*name) params;
#include "kernels.def"
};

const Backend& host_backend();
#ifdef GPUMAT_WITH_CUDA
namespace cuda {
const Backend& backend();  // src/cuda/*.cu built by nvcc
}
#endif
namespace emu {
const Backend& backend();  // src/cuda/*.cu built by the host compiler against src/emu/
}

// The backend for `device`; throws CudaError for a CUDA device in a build without CUDA.
const Backend& backend_for(const Device& device);

}  // namespace gpumat
