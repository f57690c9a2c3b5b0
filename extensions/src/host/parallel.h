// OpenMP helpers for the host kernels. Loops below kParallelMin elements run on one thread: the
// fork/join costs more than the work.
#pragma once

#include <cstdint>

namespace gpumat::host {
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace gpumat::host
