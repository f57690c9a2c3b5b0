// Program (see gpumat/program.h): a compiled executor step, eager or as a CUDA graph.
#include "gpumat/program.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "cuda/runtime.h"
#include "gpumat/allocator.h"
#include "gpumat/error.h"
#include "gpumat/ops.h"

namespace gpumat {

namespace {

using A = GpuMatrix* const*;
using S = const Scalar*;
using OpFn = void (*)(A a, S s);

struct OpEntry {
  int arrays;
  int scalars;
  OpFn fn;
};

inline float F(S s, int i) { return static_cast<float>(s[i].f); }
inline bool B(S s, int i) { return s[i].f != 0.0; }
inline int64_t I(S s, int i) { return static_cast<int64_t>(s[i].u); }

// Every op of ops.h that a graph node can call, by its ops.h name, with its arguments split into
// arrays and scalars, each list in the function's argument order (the order gpumat._core's
// wrappers take them in, which the executor's trace records).
const std::map<std::string, OpEntry>& op_table() {
  static const std::map<std::string, OpEntry> table = {
      {"array_set", {1, 1, [](A a, S s) { ops::array_set(*a[0], F(s, 0)); }}},
      {"broadcast_to", {2, 0, [](A a, S) { ops::broadcast_to(*a[0], *a[1]); }}},
      {"reduce_sum_axis_zero", {2, 0, [](A a, S) { ops::reduce_sum_axis_zero(*a[0], *a[1]); }}},
      {"add", {3, 0, [](A a, S) { ops::add(*a[0], *a[1], *a[2]); }}},
      {"multiply", {3, 0, [](A a, S) { ops::multiply(*a[0], *a[1], *a[2]); }}},
      {"add_const", {2, 1, [](A a, S s) { ops::add_const(*a[0], F(s, 0), *a[1]); }}},
      {"multiply_const", {2, 1, [](A a, S s) { ops::multiply_const(*a[0], F(s, 0), *a[1]); }}},
      {"matmul", {3, 2, [](A a, S s) { ops::matmul(*a[0], B(s, 0), *a[1], B(s, 1), *a[2]); }}},
      {"relu", {2, 0, [](A a, S) { ops::relu(*a[0], *a[1]); }}},
      {"relu_gradient", {3, 0, [](A a, S) { ops::relu_gradient(*a[0], *a[1], *a[2]); }}},
      {"softmax", {2, 0, [](A a, S) { ops::softmax(*a[0], *a[1]); }}},
      {"softmax_cross_entropy", {3, 0, [](A a, S) { ops::softmax_cross_entropy(*a[0], *a[1], *a[2]); }}},
      {"transpose", {2, 0, [](A a, S) { ops::transpose(*a[0], *a[1]); }}},
      {"random_uniform", {1, 3, [](A a, S s) { ops::random_uniform(*a[0], F(s, 0), F(s, 1), s[2].u); }}},
      {"random_normal", {1, 3, [](A a, S s) { ops::random_normal(*a[0], F(s, 0), F(s, 1), s[2].u); }}},
      {"axpy", {2, 1, [](A a, S s) { ops::axpy(F(s, 0), *a[0], *a[1]); }}},
      {"copy", {2, 0, [](A a, S) { ops::copy(*a[0], *a[1]); }}},
      {"reshape", {2, 0, [](A a, S) { ops::reshape(*a[0], *a[1]); }}},
      {"conv2d",
       {3, 4, [](A a, S s) { ops::conv2d(*a[0], *a[1], *a[2], I(s, 0), I(s, 1), I(s, 2), I(s, 3)); }}},
      {"conv2d_gradient_input",
       {3, 4,
        [](A a, S s) {
          ops::conv2d_gradient_input(*a[0], *a[1], *a[2], I(s, 0), I(s, 1), I(s, 2), I(s, 3));
        }}},
      {"conv2d_gradient_filter",
       {3, 4,
        [](A a, S s) {
          ops::conv2d_gradient_filter(*a[0], *a[1], *a[2], I(s, 0), I(s, 1), I(s, 2), I(s, 3));
        }}},
      {"conv1d", {3, 2, [](A a, S s) { ops::conv1d(*a[0], *a[1], *a[2], I(s, 0), I(s, 1)); }}},
      {"conv1d_gradient_input",
       {3, 2, [](A a, S s) { ops::conv1d_gradient_input(*a[0], *a[1], *a[2], I(s, 0), I(s, 1)); }}},
      {"conv1d_gradient_filter",
       {3, 2, [](A a, S s) { ops::conv1d_gradient_filter(*a[0], *a[1], *a[2], I(s, 0), I(s, 1)); }}},
      {"add_channel_bias", {3, 0, [](A a, S) { ops::add_channel_bias(*a[0], *a[1], *a[2]); }}},
      {"reduce_sum_channels", {2, 0, [](A a, S) { ops::reduce_sum_channels(*a[0], *a[1]); }}},
      {"max_pool2d",
       {2, 6,
        [](A a, S s) {
          ops::max_pool2d(*a[0], *a[1], I(s, 0), I(s, 1), I(s, 2), I(s, 3), I(s, 4), I(s, 5));
        }}},
      {"max_pool2d_gradient",
       {3, 6,
        [](A a, S s) {
          ops::max_pool2d_gradient(*a[0], *a[1], *a[2], I(s, 0), I(s, 1), I(s, 2), I(s, 3), I(s, 4), I(s, 5));
        }}},
      {"avg_pool2d",
       {2, 6,
        [](A a, S s) {
          ops::avg_pool2d(*a[0], *a[1], I(s, 0), I(s, 1), I(s, 2), I(s, 3), I(s, 4), I(s, 5));
        }}},
      {"avg_pool2d_gradient",
       {2, 6,
        [](A a, S s) {
          ops::avg_pool2d_gradient(*a[0], *a[1], I(s, 0), I(s, 1), I(s, 2), I(s, 3), I(s, 4), I(s, 5));
        }}},
      {"mse_loss", {3, 0, [](A a, S) { ops::mse_loss(*a[0], *a[1], *a[2]); }}},
      {"mae_loss", {3, 0, [](A a, S) { ops::mae_loss(*a[0], *a[1], *a[2]); }}},
      {"mse_loss_gradient", {4, 0, [](A a, S) { ops::mse_loss_gradient(*a[0], *a[1], *a[2], *a[3]); }}},
      {"mae_loss_gradient", {4, 0, [](A a, S) { ops::mae_loss_gradient(*a[0], *a[1], *a[2], *a[3]); }}},
      {"adam_update",
       {4, 5,
        [](A a, S s) {
          ops::adam_update(*a[0], *a[1], *a[2], *a[3], F(s, 0), F(s, 1), F(s, 2), F(s, 3), I(s, 4));
        }}},
      {"softmax_axis", {2, 1, [](A a, S s) { ops::softmax_axis(*a[0], *a[1], I(s, 0)); }}},
      {"log_softmax", {2, 1, [](A a, S s) { ops::log_softmax(*a[0], *a[1], I(s, 0)); }}},
      {"softmax_axis_gradient",
       {3, 1, [](A a, S s) { ops::softmax_axis_gradient(*a[0], *a[1], *a[2], I(s, 0)); }}},
      {"log_softmax_gradient",
       {3, 1, [](A a, S s) { ops::log_softmax_gradient(*a[0], *a[1], *a[2], I(s, 0)); }}},
      {"nll_loss", {3, 0, [](A a, S) { ops::nll_loss(*a[0], *a[1], *a[2]); }}},
      {"nll_loss_gradient", {3, 0, [](A a, S) { ops::nll_loss_gradient(*a[0], *a[1], *a[2]); }}},
      {"tanh", {2, 0, [](A a, S) { ops::tanh(*a[0], *a[1]); }}},
      {"sigmoid", {2, 0, [](A a, S) { ops::sigmoid(*a[0], *a[1]); }}},
      {"tanh_gradient", {3, 0, [](A a, S) { ops::tanh_gradient(*a[0], *a[1], *a[2]); }}},
      {"sigmoid_gradient", {3, 0, [](A a, S) { ops::sigmoid_gradient(*a[0], *a[1], *a[2]); }}},
      {"dropout", {2, 2, [](A a, S s) { ops::dropout(*a[0], *a[1], F(s, 0), s[1].u); }}},
      {"reduce_sum", {2, 1, [](A a, S s) { ops::reduce_sum(*a[0], *a[1], I(s, 0)); }}},
      {"reduce_mean", {2, 1, [](A a, S s) { ops::reduce_mean(*a[0], *a[1], I(s, 0)); }}},
      {"reduce_max", {2, 1, [](A a, S s) { ops::reduce_max(*a[0], *a[1], I(s, 0)); }}},
      {"broadcast_axis", {2, 2, [](A a, S s) { ops::broadcast_axis(*a[0], *a[1], I(s, 0), F(s, 1)); }}},
      {"reduce_max_gradient",
       {4, 1, [](A a, S s) { ops::reduce_max_gradient(*a[0], *a[1], *a[2], *a[3], I(s, 0)); }}},
      {"matmul_bias",
       {4, 3, [](A a, S s) { ops::matmul_bias(*a[0], B(s, 0), *a[1], B(s, 1), *a[2], *a[3], B(s, 2)); }}},
      {"relu_bias_gradient", {4, 0, [](A a, S) { ops::relu_bias_gradient(*a[0], *a[1], *a[2], *a[3]); }}},
      {"softmax_cross_entropy_with_gradient",
       {4, 0, [](A a, S) { ops::softmax_cross_entropy_with_gradient(*a[0], *a[1], *a[2], *a[3]); }}},
  };
  return table;
}

}  // namespace

struct Program::Step {
  std::string op;
  OpFn fn;
  std::vector<int> arrays;
  std::vector<Scalar> scalars;  // as added; run() copies them with the seed advanced
  int seeded;
  std::vector<GpuMatrix*> args;
  std::vector<Scalar> now;
};

Program::Program(Device device) : device_(device) { check_device(device); }

Program::~Program() { drop_graph(); }

int Program::add_fixed(float* data, const std::vector<int64_t>& shape) {
  Array arr;
  arr.shape = shape;
  arr.view = std::make_unique<GpuMatrix>(data, shape, device_);
  arrays_.push_back(std::move(arr));
  return static_cast<int>(arrays_.size()) - 1;
}

int Program::add_input(int input, const std::vector<int64_t>& shape) {
  if (input < 0)
    throw std::invalid_argument("Program.add_input: input must be >= 0, got " + std::to_string(input));
  if (static_cast<size_t>(input) >= inputs_.size()) inputs_.resize(static_cast<size_t>(input) + 1);
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ShapeError("Program.add_input: negative dimension");
    n *= d;
  }
  inputs_[input].needed = std::max(inputs_[input].needed, n);
  Array arr;
  arr.input = input;
  arr.shape = shape;
  arrays_.push_back(std::move(arr));
  return static_cast<int>(arrays_.size()) - 1;
}

void Program::add_step(const std::string& op, const std::vector<int>& arrays,
                       const std::vector<Scalar>& scalars, int seeded) {
  const auto& table = op_table();
  auto it = table.find(op);
  if (it == table.end()) throw std::invalid_argument("Program.add_step: no op named '" + op + "'");
  const OpEntry& e = it->second;
  if (static_cast<int>(arrays.size()) != e.arrays || static_cast<int>(scalars.size()) != e.scalars)
    throw std::invalid_argument("Program.add_step: " + op + " takes " + std::to_string(e.arrays) +
                                " arrays and " + std::to_string(e.scalars) + " scalars, got " +
                                std::to_string(arrays.size()) + " and " + std::to_string(scalars.size()));
  for (int a : arrays)
    if (a < 0 || a >= static_cast<int>(arrays_.size()))
      throw std::invalid_argument("Program.add_step: " + op + ": no array number " + std::to_string(a));
  if (seeded < -1 || seeded >= e.scalars)
    throw std::invalid_argument("Program.add_step: " + op + ": seeded scalar index out of range");
  auto step = std::make_unique<Step>();
  step->op = op;
  step->fn = e.fn;
  step->arrays = arrays;
  step->scalars = scalars;
  step->seeded = seeded;
  step->args.resize(arrays.size());
  step->now = scalars;
  steps_.push_back(std::move(step));
  drop_graph();
  warmed_ = false;
}

void Program::bind_input(int input, float* data, int64_t size) {
  if (input < 0 || input >= static_cast<int>(inputs_.size()))
    throw std::invalid_argument("Program.bind_input: no input " + std::to_string(input));
  Input& in = inputs_[input];
  if (size < in.needed)
    throw std::invalid_argument("Program.bind_input: input " + std::to_string(input) + " holds " +
                                std::to_string(size) + " floats, the program reads " +
                                std::to_string(in.needed));
  if (in.data == data && in.size == size) return;
  in.data = data;
  in.size = size;
  for (Array& arr : arrays_)
    if (arr.input == input) arr.view = std::make_unique<GpuMatrix>(data, arr.shape, device_);
}

void Program::set_graphs(bool on) {
  graphs_ = on;
  if (!on) drop_graph();
}

std::string Program::mode() const { return last_was_graph_ ? "cuda-graph" : "eager"; }

void Program::drop_graph() noexcept {
  if (graph_ != nullptr) runtime_for(device_).graph_destroy(graph_);
  graph_ = nullptr;
  captured_inputs_.clear();
}

void Program::run_steps(uint64_t step, bool capturing) {
  for (auto& s : steps_) {
    for (size_t i = 0; i < s->arrays.size(); ++i) s->args[i] = arrays_[s->arrays[i]].view.get();
    if (s->seeded >= 0) s->now[s->seeded].u = s->scalars[s->seeded].u + step;  // mod 2^64
    const int64_t before = capturing ? memory_stats(device_).num_alloc_requests : 0;
    s->fn(s->args.data(), s->now.data());
    // A block the allocator hands out during capture goes back to its cache after the op, while
    // the graph keeps writing it at every replay: refuse the graph.
    if (capturing && memory_stats(device_).num_alloc_requests != before)
      throw CudaError(
          s->op + " requested device memory during capture (per-call scratch would be baked into the graph)");
  }
}

void Program::run_eager(uint64_t step) {
  last_was_graph_ = false;
  run_steps(step, false);
}

bool Program::graph_possible() {
  if (!graphs_ || device_.is_host()) return false;
  if (!graph_status_.empty()) return false;
  for (auto& s : steps_)
    if (s->seeded >= 0) {
      graph_status_ = s->op + " draws a new random mask each step (its seed changes per run)";
      return false;
    }
  return true;
}

void Program::run(uint64_t step) {
  for (size_t k = 0; k < inputs_.size(); ++k)
    if (inputs_[k].data == nullptr && inputs_[k].needed > 0)
      throw std::invalid_argument("Program.run: input " + std::to_string(k) + " is not bound");
  if (!graph_possible()) return run_eager(step);

  std::vector<float*> bound;
  for (const Input& in : inputs_) bound.push_back(in.data);
  if (graph_ != nullptr && bound != captured_inputs_) {
    drop_graph();
    if (captures_ > kMaxRecaptures) {
      graph_status_ = "the fed device arrays moved after " + std::to_string(captures_) +
                      " captures (feed the same arrays each run to keep one graph)";
      return run_eager(step);
    }
  }
  if (graph_ == nullptr) {
    if (!warmed_) {  // workspaces grow, and one-time setup happens, outside the capture
      warmed_ = true;
      return run_eager(step);
    }
    const DeviceRuntime& rt = runtime_for(device_);
    // Captured calls run nothing yet (and count when the graph launches): take their counts back.
    const int64_t ops_before = ops::op_count(device_);
    auto uncount = [&] { ops::count_ops(device_, ops_before - ops::op_count(device_)); };
    rt.begin_capture(device_.index);
    size_t nodes = 0;
    try {
      run_steps(step, true);
      graph_ = rt.end_capture(device_.index, &nodes);
    } catch (const CudaError& e) {
      rt.abort_capture(device_.index);
      uncount();
      graph_ = nullptr;
      graph_status_ = std::string("capture failed: ") + e.what();
      return run_eager(step);
    } catch (...) {
      rt.abort_capture(device_.index);
      uncount();
      throw;
    }
    uncount();
    graph_nodes_ = static_cast<int64_t>(nodes);
    captured_inputs_ = bound;
    ++captures_;
  }
  runtime_for(device_).graph_launch(device_.index, graph_);
  ops::count_ops(device_, static_cast<int64_t>(steps_.size()));
  ++graph_launches_;
  last_was_graph_ = true;
}

}  // namespace gpumat
