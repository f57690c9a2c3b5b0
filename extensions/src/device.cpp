// Device queries and checks, the runtime and kernel table of each device; error helpers shared by
// every source.
#include "gpumat/device.h"

#include <sstream>
#include <string>

#include "backend.h"
#include "cuda/runtime.h"
#include "gpumat/error.h"

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
  switch (kind) {
    case DeviceKind::Host:
      return "host";
    case DeviceKind::Cuda:
      return "cuda:" + std::to_string(index);
    case DeviceKind::Emu:
      return "emu:" + std::to_string(index);
  }
  return "unknown device";
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
  return cuda::runtime().device_count();
#else
  return 0;
#endif
}

int emu_device_count() { return emu::runtime().device_count(); }

const DeviceRuntime& runtime_for(const Device& device) {
  if (device.kind == DeviceKind::Emu) return emu::runtime();
#ifdef GPUMAT_WITH_CUDA
  if (device.kind == DeviceKind::Cuda) return cuda::runtime();
#endif
  throw CudaError("no CUDA runtime for device " + device.str());
}

const Backend& backend_for(const Device& device) {
  if (device.kind == DeviceKind::Host) return host_backend();
  check_device(device);  // throws for a build without CUDA or a missing device
  if (device.kind == DeviceKind::Emu) return emu::backend();
#ifdef GPUMAT_WITH_CUDA
  return cuda::backend();
#else
  throw CudaError("unreachable: CUDA device in a build without CUDA");
#endif
}

void check_device(const Device& device) {
  if (device.kind == DeviceKind::Host) return;
  if (device.kind == DeviceKind::Emu) {
    const int n = emu_device_count();
    if (device.index < 0 || device.index >= n)
      throw CudaError("device " + device.str() + " is not available: " + std::to_string(n) +
                      " emulated device(s) (set GPUMAT_EMU_DEVICES for more, up to 8)");
    return;
  }
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
  if (device.is_host()) return;
  check_device(device);
  runtime_for(device).synchronize(device.index);
}

uintptr_t cuda_stream(const Device& device) {
  check_device(device);
  if (device.is_host()) return 0;
  return runtime_for(device).stream_handle(device.index);
}

}  // namespace gpumat
