// Devices: the host (CPU, parallel loops + BLAS), CUDA GPUs, and the emulated CUDA device (the CUDA
// kernel sources run on the CPU by src/emu/, a correctness tool that needs no GPU). Every op
// dispatches on the device of its arguments; arguments on different devices are an error, never an
// implicit copy.
#pragma once

#include <cstdint>
#include <string>

namespace gpumat {

enum class DeviceKind { Host = 0, Cuda = 1, Emu = 2 };

struct Device {
  DeviceKind kind = DeviceKind::Host;
  int index = 0;  // CUDA (or emulated) ordinal; always 0 for the host

  static Device host() { return Device{DeviceKind::Host, 0}; }
  static Device cuda(int index) { return Device{DeviceKind::Cuda, index}; }
  static Device emu(int index) { return Device{DeviceKind::Emu, index}; }
  bool is_cuda() const { return kind == DeviceKind::Cuda; }
  bool is_host() const { return kind == DeviceKind::Host; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "host", "cuda:N" or "emu:N"
};

// True when libgpumat was compiled with CUDA support (nvcc found at build time).
bool built_with_cuda();

// Number of usable CUDA devices; 0 when built without CUDA, or when no driver or GPU is present
// (never throws).
int cuda_device_count();

// Number of emulated CUDA devices (GPUMAT_EMU_DEVICES, default 1; always built).
int emu_device_count();

// Throws CudaError unless `device` is the host, an existing CUDA device or an emulated device. Every op calls
// it (through GpuMatrix construction), so a missing GPU is a clear error, not a crash.
void check_device(const Device& device);

// Waits until all work queued on `device` has finished (no-op on the host). Throws CudaError with
// any asynchronous fault that the device reported.
void synchronize(const Device& device);

// The CUDA stream gpumat's kernels and copies on `device` run on, as an integer (a cudaStream_t,
// non-blocking, created on first use; an emulator handle on the emulated device), for interop
// protocols (__cuda_array_interface__); 0 for the host. Throws CudaError unless the device exists.
uintptr_t cuda_stream(const Device& device);

}  // namespace gpumat
