// The emulated device's self-test: deliberately wrong kernels, one per kind of bug its checks find,
// next to correct twins, in the emulated build only (never in a CUDA build). gpumat._core's private
// _emu_selftest(name, index) runs them for tests/kernels/test_emulator_checks.py; nothing else
// calls them. Each test returns the values it computed (copied back, so a fault in its kernel is
// reported there as the CudaError of the copy).
#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../cuda/common.cuh"
#include "gpumat/gpu_matrix.h"

namespace gpumat::GPUMAT_CUDA_NS {

namespace {

// memcheck: `<=` for `<`, so thread n writes one float past the array.
__global__ void write_past_end_kernel(float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i <= n) out[i] = 1.0f;
}

__global__ void write_kernel(float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 1.0f;
}

// memcheck: a static __shared__ array read at index i (32: one past its end).
__global__ void shared_index_kernel(float* out, int i) {
  __shared__ float tile[32];
  tile[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = tile[i];
}

// memcheck: a float4 load from an address that is 4 bytes past a 16-byte boundary.
__global__ void misaligned_float4_kernel(const float* in, float* out) {
  if (threadIdx.x != 0) return;
  const float4 v = *reinterpret_cast<const float4*>(in + 1);
  out[0] = v.x + v.y + v.z + v.w;
}

// racecheck: every thread adds its neighbour's value to its own slot, without a __syncthreads()
// between the neighbour's write and this read (Sync: with one).
template <bool Sync>
__global__ void neighbour_sum_kernel(float* out) {
  __shared__ float slot[128];
  const unsigned t = threadIdx.x;
  slot[t] = static_cast<float>(t);
  __syncthreads();
  const float next = slot[(t + 1) % 128];
  if (Sync) __syncthreads();
  slot[t] = next + 1.0f;
  __syncthreads();
  out[t] = slot[t];
}

// racecheck: each block's thread 0 increments one counter, with a plain read-modify-write (the
// updates of concurrent blocks are lost on a GPU) or an atomicAdd.
template <bool Atomic>
__global__ void block_counter_kernel(unsigned* counter) {
  if (threadIdx.x != 0) return;
  if (Atomic)
    atomicAdd(counter, 1u);
  else
    *counter = *counter + 1u;
}

// initcheck: reads an array nothing has written.
__global__ void copy_kernel(const float* in, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[i];
}

// initcheck (and the poisoning of static __shared__ memory): block 0 fills its tile, the other
// blocks half of it, and every thread reads its own slot. On the CPU a later block would find what
// block 0 left in the other half.
__global__ void stale_shared_kernel(float* out) {
  __shared__ float tile[64];
  const int filled = blockIdx.x == 0 ? 64 : 32;
  if (static_cast<int>(threadIdx.x) < filled) tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = tile[threadIdx.x];
}

// memcheck: a kernel given a host pointer.
__global__ void host_pointer_kernel(float* out) {
  if (threadIdx.x == 0) out[0] = 1.0f;
}

__global__ void fill_kernel(float* out, int64_t n, float value) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = value;
}

// gpumat.profile's known truths (tests/kernels/test_profile.py): the textbook access patterns whose
// request, sector and bank counts are known exactly.
// A coalesced copy: each warp reads and writes 32 consecutive floats (128 bytes: 4 sectors).
__global__ void profile_copy_kernel(const float* in, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[i];
}

// out (n, n) = in^T, one thread per element, threads of a warp along a row of `in`: the loads are
// coalesced, the stores stride by n floats (a sector per lane).
__global__ void profile_transpose_naive_kernel(const float* in, float* out, int n) {
  const int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 32 + threadIdx.y;
  if (r < n && c < n) out[c * n + r] = in[r * n + c];
}

// The same through a 32 x 33 shared tile (the padding column puts a tile column in 32 banks): both
// the loads and the stores are coalesced, and the column reads of the tile are conflict-free.
__global__ void profile_transpose_tiled_kernel(const float* in, float* out, int n) {
  __shared__ float tile[32][33];
  const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = in[y * n + x];
  __syncthreads();
  const int tx = blockIdx.y * 32 + threadIdx.x, ty = blockIdx.x * 32 + threadIdx.y;
  if (tx < n && ty < n) out[ty * n + tx] = tile[threadIdx.x][threadIdx.y];
}

// A 32 x 32 shared tile filled row by row, then read down a column: lane l reads word l * Stride + w.
// Stride 32 puts every lane of a warp in one bank (32-way conflict); stride 33 in 32 banks.
template <int Stride>
__global__ void profile_shared_column_kernel(float* out) {
  __shared__ float tile[32 * Stride];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;  // 32 warps
  tile[w * Stride + lane] = static_cast<float>(w * 32 + lane);
  __syncthreads();
  out[threadIdx.x] = tile[lane * Stride + w];
}

std::vector<float> fetch(const GpuMatrix& m) {
  std::vector<float> v(static_cast<size_t>(m.size()));
  m.copy_to_host(v.data(), m.size());
  return v;
}

// racecheck, depending on the data: block b's thread 0 writes out[index[b]]. Distinct indexes are
// correct; a repeated one is a lost update between blocks (the tests of GPUMAT_EMU_CHECK_REPEATS).
__global__ void indexed_write_kernel(const float* index, float* out) {
  if (threadIdx.x == 0) out[static_cast<int64_t>(index[blockIdx.x])] = static_cast<float>(blockIdx.x + 1);
}

// Holds the device's stream for `ms` milliseconds (a host function in its queue).
void hold_stream(cudaStream_t s, int ms) {
  auto* held = new int(ms);
  check(cudaLaunchHostFunc(
            s,
            [](void* p) {
              std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(p)));
              delete static_cast<int*>(p);
            },
            held),
        "emu selftest: hold");
}

}  // namespace

namespace {

// What a self-test runs with: the device, its stream, the launches' op name, the test's name (a
// test with a correct twin reads which of the two it is) and the number after a "name:N".
struct Case {
  Device d;
  cudaStream_t s;
  const char* op;
  const std::string& name;
  int arg;
};
using Test = std::vector<float> (*)(const Case&);

// racecheck across blocks: 8 blocks count into one word, plainly or atomically.
template <bool Atomic>
std::vector<float> block_counter_test(const Case& c) {
  GpuMatrix counter({1}, c.d);
  check(cudaMemsetAsync(counter.data(), 0, sizeof(unsigned), c.s), c.op);
  launch<block_counter_kernel<Atomic>>(c.op, 8, 32, 0, c.s, reinterpret_cast<unsigned*>(counter.data()));
  unsigned value = 0;
  counter.copy_to_host(reinterpret_cast<float*>(&value), 1);
  return {static_cast<float>(value)};
}

// The profile's coalescing case: a 64 x 64 transpose of in[i] = i in 2 x 2 blocks of 32 x 32.
template <auto Kernel>
std::vector<float> transpose_test(const Case& c) {
  GpuMatrix in({64, 64}, c.d), out({64, 64}, c.d);
  std::vector<float> v(4096);
  for (int i = 0; i < 4096; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  in.copy_from_host(v.data(), 4096);
  launch<Kernel>(c.op, dim3(2, 2), dim3(32, 32), 0, c.s, static_cast<const float*>(in.data()), out.data(),
                 64);
  return fetch(out);
}

// The profile's bank-conflict case: one block of 1024 reading a shared tile by columns.
template <int Stride>
std::vector<float> shared_column_test(const Case& c) {
  GpuMatrix out({1024}, c.d);
  launch<profile_shared_column_kernel<Stride>>(c.op, 1, 1024, 0, c.s, out.data());
  return fetch(out);
}

// GPUMAT_EMU_CHECK_REPEATS: "repeat:N" makes N correct launches of indexed_write_kernel, then one
// with the same arguments whose index data makes the two blocks write one word ("repeat_after_
// allocation:N": an allocation in between). Returns out.
std::vector<float> repeat_test(const Case& c) {
  GpuMatrix index({2}, c.d), out({2}, c.d);
  const float distinct[2] = {0.0f, 1.0f}, same[2] = {0.0f, 0.0f};
  index.copy_from_host(distinct, 2);
  const auto* ix = static_cast<const float*>(index.data());
  for (int i = 0; i < c.arg; ++i) launch<indexed_write_kernel>(c.op, 2, 32, 0, c.s, ix, out.data());
  index.copy_from_host(same, 2);
  std::unique_ptr<GpuMatrix> scratch;
  if (c.name.rfind("repeat_after_allocation", 0) == 0)
    scratch = std::make_unique<GpuMatrix>(std::vector<int64_t>{4}, c.d);
  launch<indexed_write_kernel>(c.op, 2, 32, 0, c.s, ix, out.data());
  return fetch(out);
}

// The self-tests by name ("name:N" is found under "name").
const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = {
      {"write",
       [](const Case& c) {
         GpuMatrix a({10}, c.d);
         launch<write_kernel>(c.op, 1, 32, 0, c.s, a.data(), int64_t{10});
         return fetch(a);
       }},
      {"write_past_end",
       [](const Case& c) {
         GpuMatrix a({10}, c.d);
         launch<write_past_end_kernel>(c.op, 1, 32, 0, c.s, a.data(), int64_t{10});
         return fetch(a);
       }},
      {"shared_index",
       [](const Case& c) {
         GpuMatrix out({1}, c.d);
         launch<shared_index_kernel>(c.op, 1, 32, 0, c.s, out.data(), 31);
         return fetch(out);
       }},
      {"shared_index_past_end",
       [](const Case& c) {
         GpuMatrix out({1}, c.d);
         launch<shared_index_kernel>(c.op, 1, 32, 0, c.s, out.data(), 32);
         return fetch(out);
       }},
      {"misaligned_float4",
       [](const Case& c) {
         GpuMatrix in({8}, c.d), out({1}, c.d);
         const std::vector<float> ones(8, 1.0f);
         in.copy_from_host(ones.data(), 8);
         launch<misaligned_float4_kernel>(c.op, 1, 32, 0, c.s, static_cast<const float*>(in.data()),
                                          out.data());
         return fetch(out);
       }},
      {"shared_sync",
       [](const Case& c) {
         GpuMatrix out({128}, c.d);
         launch<neighbour_sum_kernel<true>>(c.op, 1, 128, 0, c.s, out.data());
         return fetch(out);
       }},
      {"shared_race",
       [](const Case& c) {
         GpuMatrix out({128}, c.d);
         launch<neighbour_sum_kernel<false>>(c.op, 1, 128, 0, c.s, out.data());
         return fetch(out);
       }},
      {"block_counter_plain", block_counter_test<false>},
      {"block_counter_atomic", block_counter_test<true>},
      {"uninitialised_read",
       [](const Case& c) {
         GpuMatrix in({32}, c.d), out({32}, c.d);  // `in` is allocated, never written
         launch<copy_kernel>(c.op, 1, 32, 0, c.s, static_cast<const float*>(in.data()), out.data(),
                             int64_t{32});
         return fetch(out);
       }},
      {"stale_shared",
       [](const Case& c) {
         GpuMatrix out({128}, c.d);
         launch<stale_shared_kernel>(c.op, 2, 64, 0, c.s, out.data());
         return fetch(out);
       }},
      {"host_pointer",
       [](const Case& c) {
         std::vector<float> host(4, 0.0f);
         launch<host_pointer_kernel>(c.op, 1, 32, 0, c.s, host.data());
         synchronize(c.d);
         return host;
       }},
      // Asynchronous launches: with the stream held, a fill is queued; a read of the device memory
      // without synchronizing (emulated device memory is host memory) sees the values from before
      // it, a synchronized read the fill's. Returns [unsynchronized, synchronized].
      {"unsynchronized_read",
       [](const Case& c) {
         GpuMatrix a({4}, c.d);
         const std::vector<float> ones(4, 1.0f);
         a.copy_from_host(ones.data(), 4);
         synchronize(c.d);
         hold_stream(c.s, 300);
         launch<fill_kernel>(c.op, 1, 32, 0, c.s, a.data(), int64_t{4}, 5.0f);
         const float before = a.data()[2];
         synchronize(c.d);
         return std::vector<float>{before, a.data()[2]};
       }},
      {"profile_copy",
       [](const Case& c) {  // in[i] = i, 1024 floats in 4 blocks of 256
         GpuMatrix in({1024}, c.d), out({1024}, c.d);
         std::vector<float> v(1024);
         for (int i = 0; i < 1024; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
         in.copy_from_host(v.data(), 1024);
         launch<profile_copy_kernel>(c.op, 4, 256, 0, c.s, static_cast<const float*>(in.data()), out.data(),
                                     int64_t{1024});
         return fetch(out);
       }},
      {"profile_transpose_naive", transpose_test<profile_transpose_naive_kernel>},
      {"profile_transpose_tiled", transpose_test<profile_transpose_tiled_kernel>},
      {"profile_shared_stride32", shared_column_test<32>},
      {"profile_shared_padded", shared_column_test<33>},
      {"repeat", repeat_test},
      {"repeat_after_allocation", repeat_test},
      // Holds the stream for the given milliseconds ("hold:300") and returns at once.
      {"hold",
       [](const Case& c) {
         hold_stream(c.s, c.arg);
         return std::vector<float>{};
       }},
  };
  return table;
}

}  // namespace

std::vector<float> selftest(const std::string& name, int dev) {
  const size_t colon = name.find(':');
  const auto found = tests().find(name.substr(0, colon));
  if (found == tests().end()) throw std::invalid_argument("emu selftest: unknown test '" + name + "'");
  const int arg = colon == std::string::npos ? 0 : std::stoi(name.substr(colon + 1));
  const std::string op = "emu selftest " + name;
  return found->second(Case{Device::emu(dev), activate(dev), op.c_str(), name, arg});
}

}  // namespace gpumat::GPUMAT_CUDA_NS
