// Device queries and checks; error helpers shared by every source.
#include "gpumat/device.h"

#include <sstream>
#include <string>

#include "gpumat/error.h"
#ifdef GPUMAT_WITH_CUDA
#include "cuda/runtime.h"
#endif

namespace gpumat {

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

std::string Device::str() const {
  return kind == DeviceKind::Host ? "host" : "cuda:" + std::to_string(index);
}

bool built_with_cuda() {
#ifdef GPUMAT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef GPUMAT_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

void check_device(const Device& device) {
  if (device.kind == DeviceKind::Host) return;
  if (!built_with_cuda())
    throw CudaError("device " + device.str() +
                    " is not available: gpumat was built without CUDA (nvcc was not found, or "
                    "GPUMAT_CUDA=0); use the host device");
  int n = cuda_device_count();
  if (device.index < 0 || device.index >= n)
    throw CudaError("device " + device.str() + " is not available: " +
                    (n == 0 ? std::string("no CUDA device or driver was found")
                            : std::to_string(n) + " CUDA device(s) present"));
}

void synchronize(const Device& device) {
#ifdef GPUMAT_WITH_CUDA
  if (device.is_cuda()) {
    check_device(device);
    cuda::synchronize(device.index);
  }
#else
  (void)device;
#endif
}

uintptr_t cuda_stream(const Device& device) {
  check_device(device);
#ifdef GPUMAT_WITH_CUDA
  if (device.is_cuda()) return cuda::stream_handle(device.index);
#endif
  return 0;
}

}  // namespace gpumat
