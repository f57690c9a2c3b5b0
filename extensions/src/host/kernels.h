// Host (CPU) kernels: one function per line of ../kernels.def, defined in <family>.cpp.
#pragma once

#include <cstdint>

#include "../backend.h"  // ConvShape, PoolShape

namespace gpumat::host {

#define GPUMAT_KERNEL(name, params) void name params;
#include "../kernels.def"

}  // namespace gpumat::host
