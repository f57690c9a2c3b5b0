// The CUDA function table (the emulated device's too: see common.cuh), filled from ../kernels.def in
// its order (the order of Backend's fields).
#include "../backend.h"
#include "kernels.cuh"

namespace gpumat::GPUMAT_CUDA_NS {

const Backend& backend() {
  static const Backend table = {
#define GPUMAT_KERNEL(name, params) GPUMAT_CUDA_NS::name,
#include "../kernels.def"
  };
  return table;
}

}  // namespace gpumat::GPUMAT_CUDA_NS
