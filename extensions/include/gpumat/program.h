// Program: one planned step of the executor (gpumat/runtime/) compiled into a single native
// call. The executor traces its schedule once (which gpumat::ops call each node makes, on which
// planned arrays, with which scalars) and hands that list here; run() then makes the same calls in
// order with no Python between them.
//
// On a CUDA or emulated device, run() can also capture the step once into a CUDA graph and replay
// it with one graph launch per call (stream capture: NVIDIA, CUDA C++ Programming Guide, "CUDA
// Graphs", and PyTorch's torch.cuda.CUDAGraph): the first run is eager (it grows the per-device
// workspaces outside the capture), the second captures, later ones launch. A graph bakes in every
// pointer and scalar, so the program falls back to eager calls, and says why in graph_status(),
// when a step's scalars change per run (dropout's seed), when an op asks the allocator for memory
// or synchronizes during capture, or when capture fails; when the bound input arrays move, it
// captures again (at most kMaxRecaptures times, then eager). A graph also holds the per-device
// workspaces' addresses: when another op grows (reallocates) a workspace, the graph is dropped and
// captured again before its next launch, so it never writes into a freed block. Capture runs on
// the calling thread's own stream (runtime.h's begin_capture), so other threads' work on the
// device is never recorded into the graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpumat/device.h"
#include "gpumat/gpu_matrix.h"

namespace gpumat {

// A non-array argument of an op: floats and flags in `f`, integers (seeds, axes, strides) exactly
// in `u` as 64 bits (a negative int is its two's complement).
struct Scalar {
  double f = 0.0;
  uint64_t u = 0;
};

class Program {
 public:
  static constexpr int kMaxRecaptures = 3;

  // Throws CudaError for a device that does not exist.
  explicit Program(Device device);
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  const Device& device() const { return device_; }

  // A fixed array: `shape` over `data`, memory the caller keeps alive and in place (a planned
  // buffer). Returns its number. ShapeError for a bad shape or pointer.
  int add_fixed(float* data, const std::vector<int64_t>& shape);
  // An input array: `shape` over whatever array is bound to input `input` at run time (a device
  // array fed to the executor). Returns its number. ValueError for a negative input.
  int add_input(int input, const std::vector<int64_t>& shape);

  // Appends a call of gpumat::ops::`op` (the ops.h name) on `arrays` (array numbers, in the op's
  // argument order) and `scalars` (likewise). `seeded` is the index of a scalar that is a seed
  // advanced by the run's step (dropout: seed + step, mod 2^64), or -1. Throws ValueError for an
  // unknown op, a wrong number of arguments, or an unknown array number.
  void add_step(const std::string& op, const std::vector<int>& arrays, const std::vector<Scalar>& scalars,
                int seeded = -1);

  // Binds input `input` to `size` floats at `data` on this program's device, for the next runs.
  // ValueError for an unknown input, or one smaller than an array declared over it.
  void bind_input(int input, float* data, int64_t size);

  // Makes every call of the step (or replays its graph). `step` advances seeded scalars. Throws
  // what the ops throw (ShapeError, CudaError...), ValueError when an input is unbound.
  void run(uint64_t step);

  // CUDA graphs on or off (off: always eager calls). Ignored on the host. Turning them off drops
  // a captured graph.
  void set_graphs(bool on);

  int num_steps() const { return static_cast<int>(steps_.size()); }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  // "eager" (one call per op, all in C++) or "cuda-graph" (the last run replayed a graph).
  std::string mode() const;
  // Why the step is not (or no longer) a graph: "" while graphs are possible or in use.
  const std::string& graph_status() const { return graph_status_; }
  int64_t graph_nodes() const { return graph_nodes_; }
  int64_t captures() const { return captures_; }
  int64_t graph_launches() const { return graph_launches_; }

 private:
  struct Step;
  struct Array {
    int input = -1;  // -1: fixed; else the input it views
    std::vector<int64_t> shape;
    std::unique_ptr<GpuMatrix> view;
  };
  struct Input {
    float* data = nullptr;
    int64_t size = 0;
    int64_t needed = 0;  // the largest array declared over it
  };

  void run_eager(uint64_t step);
  void run_steps(uint64_t step, bool capturing);
  void drop_graph() noexcept;
  bool graph_possible();

  Device device_;
  std::vector<Array> arrays_;
  std::vector<Input> inputs_;
  std::vector<std::unique_ptr<Step>> steps_;
  bool graphs_ = true;
  bool warmed_ = false;
  bool last_was_graph_ = false;
  void* graph_ = nullptr;
  std::vector<float*> captured_inputs_;
  uint64_t captured_workspaces_ = 0;  // the workspace generation the graph was captured at
  std::string graph_status_;
  int64_t graph_nodes_ = 0, captures_ = 0, graph_launches_ = 0;
};

}  // namespace gpumat
