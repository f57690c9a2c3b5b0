// A small C++ program that links libgpumat.so and checks a few ops on the host device, the emulated
// CUDA device, and cuda:0 when one is present, to show the library is usable without Python.
#include <cmath>
#include <cstdio>
#include <vector>

#include "gpumat/allocator.h"
#include "gpumat/error.h"
#include "gpumat/gpu_matrix.h"
#include "gpumat/ops.h"

using gpumat::Device;
using gpumat::GpuMatrix;

static int failures = 0;
#define EXPECT(cond)                                                \
  do {                                                              \
    if (!(cond)) {                                                  \
      std::printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                   \
    }                                                               \
  } while (0)

static void exercise(Device dev) {
  std::printf("device %s\n", dev.str().c_str());
  // c = a @ b for a (2,3), b (3,2)
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12}, c(4);
  GpuMatrix da({2, 3}, dev), db({3, 2}, dev), dc({2, 2}, dev);
  da.copy_from_host(a.data(), 6);
  db.copy_from_host(b.data(), 6);
  gpumat::ops::matmul(da, false, db, false, dc);
  dc.copy_to_host(c.data(), 4);
  EXPECT(c[0] == 58 && c[1] == 64 && c[2] == 139 && c[3] == 154);

  // softmax rows sum to 1
  GpuMatrix ds({2, 3}, dev);
  gpumat::ops::softmax(da, ds, -1);
  std::vector<float> s(6);
  ds.copy_to_host(s.data(), 6);
  EXPECT(std::fabs(s[0] + s[1] + s[2] - 1.0f) < 1e-6f);

  // shape errors are exceptions, not crashes
  bool threw = false;
  try {
    gpumat::ops::matmul(da, false, da, false, dc);
  } catch (const gpumat::ShapeError& e) {
    threw = true;
    std::printf("  expected error: %s\n", e.what());
  }
  EXPECT(threw);

  // freed blocks are reused
  auto before = gpumat::memory_stats(dev).device_malloc_calls;
  for (int i = 0; i < 10; ++i) GpuMatrix tmp({1000, 100}, dev);
  EXPECT(gpumat::memory_stats(dev).device_malloc_calls <= before + 1);

  // a foreign view works on memory gpumat did not allocate and never frees it
  auto in_use = gpumat::memory_stats(dev).bytes_in_use;
  auto requests = gpumat::memory_stats(dev).num_alloc_requests;
  {
    GpuMatrix foreign(dc.data(), {4}, dev);
    EXPECT(!foreign.owns_data() && foreign.data() == dc.data() && foreign.size() == 4);
    gpumat::ops::fill(foreign, 2.5f);
  }
  dc.copy_to_host(c.data(), 4);
  EXPECT(c[0] == 2.5f && c[3] == 2.5f);
  EXPECT(gpumat::memory_stats(dev).bytes_in_use == in_use);
  EXPECT(gpumat::memory_stats(dev).num_alloc_requests == requests);
  threw = false;
  try {
    GpuMatrix bad(nullptr, {3}, dev);
  } catch (const gpumat::ShapeError&) {
    threw = true;
  }
  EXPECT(threw);
}

int main() {
  exercise(Device::host());
  exercise(Device::emu(0));
  if (gpumat::cuda_device_count() > 0)
    exercise(Device::cuda(0));
  else
    std::printf("no CUDA device: %s\n", gpumat::built_with_cuda() ? "built with CUDA" : "built without CUDA");
  std::printf(failures ? "%d FAILED\n" : "all passed\n", failures);
  return failures ? 1 : 0;
}
