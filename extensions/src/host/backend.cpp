// The host function table, filled from ../kernels.def in its order (the order of Backend's fields).
#include "../backend.h"

#include "kernels.h"

namespace gpumat {

const Backend& host_backend() {
  static const Backend table = {
#define GPUMAT_KERNEL(name, params) host::name,
#include "../kernels.def"
  };
  return table;
}

}  // namespace gpumat
