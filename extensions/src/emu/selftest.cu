// The emulated device's self-test: deliberately wrong kernels, one per kind of bug its checks find,
// next to correct twins, in the emulated build only (never in a CUDA build). gpumat._core's private
// _emu_selftest(name, index) runs them for tests/kernels/test_emulator_checks.py; nothing else
// calls them. Each test returns the values it computed (copied back, so a fault in its kernel is
// reported there as the CudaError of the copy).
#include <chrono>
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

std::vector<float> selftest(const std::string& name, int dev) {
  const Device d = Device::emu(dev);
  cudaStream_t s = activate(dev);
  const std::string op = "emu selftest " + name;
  if (name == "write_past_end" || name == "write") {
    GpuMatrix a({10}, d);
    if (name == "write")
      launch<write_kernel>(op.c_str(), 1, 32, 0, s, a.data(), int64_t{10});
    else
      launch<write_past_end_kernel>(op.c_str(), 1, 32, 0, s, a.data(), int64_t{10});
    return fetch(a);
  }
  if (name == "shared_index_past_end" || name == "shared_index") {
    GpuMatrix out({1}, d);
    launch<shared_index_kernel>(op.c_str(), 1, 32, 0, s, out.data(), name == "shared_index" ? 31 : 32);
    return fetch(out);
  }
  if (name == "misaligned_float4") {
    GpuMatrix in({8}, d), out({1}, d);
    const std::vector<float> ones(8, 1.0f);
    in.copy_from_host(ones.data(), 8);
    launch<misaligned_float4_kernel>(op.c_str(), 1, 32, 0, s, static_cast<const float*>(in.data()),
                                     out.data());
    return fetch(out);
  }
  if (name == "shared_race" || name == "shared_sync") {
    GpuMatrix out({128}, d);
    if (name == "shared_sync")
      launch<neighbour_sum_kernel<true>>(op.c_str(), 1, 128, 0, s, out.data());
    else
      launch<neighbour_sum_kernel<false>>(op.c_str(), 1, 128, 0, s, out.data());
    return fetch(out);
  }
  if (name == "block_counter_plain" || name == "block_counter_atomic") {
    GpuMatrix counter({1}, d);
    check(cudaMemsetAsync(counter.data(), 0, sizeof(unsigned), s), op.c_str());
    auto* c = reinterpret_cast<unsigned*>(counter.data());
    if (name == "block_counter_atomic")
      launch<block_counter_kernel<true>>(op.c_str(), 8, 32, 0, s, c);
    else
      launch<block_counter_kernel<false>>(op.c_str(), 8, 32, 0, s, c);
    unsigned value = 0;
    counter.copy_to_host(reinterpret_cast<float*>(&value), 1);
    return {static_cast<float>(value)};
  }
  if (name == "uninitialised_read") {
    GpuMatrix in({32}, d), out({32}, d);  // `in` is allocated, never written
    launch<copy_kernel>(op.c_str(), 1, 32, 0, s, static_cast<const float*>(in.data()), out.data(),
                        int64_t{32});
    return fetch(out);
  }
  if (name == "stale_shared") {
    GpuMatrix out({128}, d);
    launch<stale_shared_kernel>(op.c_str(), 2, 64, 0, s, out.data());
    return fetch(out);
  }
  if (name == "host_pointer") {
    std::vector<float> host(4, 0.0f);
    launch<host_pointer_kernel>(op.c_str(), 1, 32, 0, s, host.data());
    synchronize(d);
    return host;
  }
  // Asynchronous launches: with the stream held, a fill is queued; a read of the device memory
  // without synchronizing (emulated device memory is host memory) sees the values from before it,
  // a synchronized read the fill's. Returns [unsynchronized, synchronized].
  if (name == "unsynchronized_read") {
    GpuMatrix a({4}, d);
    const std::vector<float> ones(4, 1.0f);
    a.copy_from_host(ones.data(), 4);
    synchronize(d);
    hold_stream(s, 300);
    launch<fill_kernel>(op.c_str(), 1, 32, 0, s, a.data(), int64_t{4}, 5.0f);
    const float before = a.data()[2];
    synchronize(d);
    return {before, a.data()[2]};
  }
  if (name == "profile_copy") {  // in[i] = i, 1024 floats in 4 blocks of 256
    GpuMatrix in({1024}, d), out({1024}, d);
    std::vector<float> v(1024);
    for (int i = 0; i < 1024; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
    in.copy_from_host(v.data(), 1024);
    launch<profile_copy_kernel>(op.c_str(), 4, 256, 0, s, static_cast<const float*>(in.data()), out.data(),
                                int64_t{1024});
    return fetch(out);
  }
  if (name == "profile_transpose_naive" || name == "profile_transpose_tiled") {  // 64 x 64, in[i] = i
    GpuMatrix in({64, 64}, d), out({64, 64}, d);
    std::vector<float> v(4096);
    for (int i = 0; i < 4096; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
    in.copy_from_host(v.data(), 4096);
    const dim3 grid(2, 2);
    if (name == "profile_transpose_tiled")
      launch<profile_transpose_tiled_kernel>(op.c_str(), grid, dim3(32, 32), 0, s,
                                             static_cast<const float*>(in.data()), out.data(), 64);
    else
      launch<profile_transpose_naive_kernel>(op.c_str(), grid, dim3(32, 32), 0, s,
                                             static_cast<const float*>(in.data()), out.data(), 64);
    return fetch(out);
  }
  if (name == "profile_shared_stride32" || name == "profile_shared_padded") {  // 1 block of 1024
    GpuMatrix out({1024}, d);
    if (name == "profile_shared_padded")
      launch<profile_shared_column_kernel<33>>(op.c_str(), 1, 1024, 0, s, out.data());
    else
      launch<profile_shared_column_kernel<32>>(op.c_str(), 1, 1024, 0, s, out.data());
    return fetch(out);
  }
  // GPUMAT_EMU_CHECK_REPEATS: "repeat:N" makes N correct launches of indexed_write_kernel, then one
  // with the same arguments whose index data makes the two blocks write one word ("repeat_after_
  // allocation:N": an allocation in between). Returns out.
  const bool after_allocation = name.rfind("repeat_after_allocation:", 0) == 0;
  if (name.rfind("repeat:", 0) == 0 || after_allocation) {
    const int n = std::stoi(name.substr(name.find(':') + 1));
    GpuMatrix index({2}, d), out({2}, d);
    const float distinct[2] = {0.0f, 1.0f}, same[2] = {0.0f, 0.0f};
    index.copy_from_host(distinct, 2);
    const auto* ix = static_cast<const float*>(index.data());
    for (int i = 0; i < n; ++i) launch<indexed_write_kernel>(op.c_str(), 2, 32, 0, s, ix, out.data());
    index.copy_from_host(same, 2);
    std::unique_ptr<GpuMatrix> scratch;
    if (after_allocation) scratch = std::make_unique<GpuMatrix>(std::vector<int64_t>{4}, d);
    launch<indexed_write_kernel>(op.c_str(), 2, 32, 0, s, ix, out.data());
    return fetch(out);
  }
  // Holds the stream for the given milliseconds ("hold:300") and returns at once.
  if (name.rfind("hold:", 0) == 0) {
    hold_stream(s, std::stoi(name.substr(5)));
    return {};
  }
  throw std::invalid_argument("emu selftest: unknown test '" + name + "'");
}

}  // namespace gpumat::GPUMAT_CUDA_NS
