// Program (see gpumat/program.h): a compiled executor step, eager or as a CUDA graph.
#include "gpumat/program.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <type_traits>
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

// How a step passes the arguments of an ops.h function: each GpuMatrix parameter is the next of the
// step's arrays, every other parameter the next of its scalars, each list in the function's
// argument order (the order gpumat._core's wrappers take them in, which the executor's trace
// records). Floats and flags come from Scalar::f, integers (axes, strides, steps, seeds) exactly
// from Scalar::u.
template <typename T>
constexpr bool kIsArray = std::is_same_v<std::decay_t<T>, GpuMatrix>;

// How many scalars a parameter takes: ops::Strides one per dim it can hold, the others one.
template <typename T>
constexpr int kScalars = std::is_same_v<std::decay_t<T>, ops::Strides> ? ops::kMaxStridedDims : 1;

template <typename T>
T step_arg(A a, S s, int array, int scalar) {
  if constexpr (kIsArray<T>) {
    return *a[array];
  } else if constexpr (std::is_same_v<T, ops::Strides>) {
    ops::Strides st{};
    for (int d = 0; d < ops::kMaxStridedDims; ++d) st.v[d] = static_cast<int64_t>(s[scalar + d].u);
    return st;
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(s[scalar].f);
  } else if constexpr (std::is_same_v<T, bool>) {
    return s[scalar].f != 0.0;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<int64_t>(s[scalar].u);
  } else {
    static_assert(std::is_same_v<T, uint64_t>,
                  "a step passes arrays, floats, bools, int64, uint64 and Strides");
    return s[scalar].u;
  }
}

template <typename Fn>
struct StepOf;

template <typename... P>
struct StepOf<void (*)(P...)> {
  static constexpr bool kArray[] = {false, kIsArray<P>...};  // the leading false: no empty array
  // The number of array (or scalar) parameters before parameter k.
  static constexpr int arrays_before(size_t k) {
    int n = 0;
    for (size_t i = 0; i < k; ++i) n += kArray[i + 1] ? 1 : 0;
    return n;
  }
  static constexpr int kWidth[] = {0, (kIsArray<P> ? 0 : kScalars<P>)...};  // scalars each takes
  // The number of scalars the parameters before parameter k take.
  static constexpr int scalars_before(size_t k) {
    int n = 0;
    for (size_t i = 0; i < k; ++i) n += kWidth[i + 1];
    return n;
  }
  template <size_t K>
  static constexpr int kArraysBefore = arrays_before(K);
  template <size_t K>
  static constexpr int kScalarsBefore = scalars_before(K);
  template <void (*F)(P...), size_t... K>
  static void call(A a, S s, std::index_sequence<K...>) {
    F(step_arg<P>(a, s, kArraysBefore<K>, kScalarsBefore<K>)...);
  }
  template <void (*F)(P...)>
  static void run(A a, S s) {
    call<F>(a, s, std::index_sequence_for<P...>{});
  }
  template <void (*F)(P...)>
  static OpEntry entry() {
    constexpr int arrays = arrays_before(sizeof...(P));
    return {arrays, scalars_before(sizeof...(P)), &run<F>};
  }
};

// An op_table() entry: ops::NAME by its ops.h name, its arrays and scalars counted from its signature.
#define GPUMAT_STEP(NAME) {#NAME, StepOf<decltype(&ops::NAME)>::entry<&ops::NAME>()}

// Every op of ops.h that a graph node can call (all but the multi-tensor optimizer steps, whose
// tensor lists a step cannot hold): the pointwise ops from kernels.def, then the others grouped by
// family as ops.h is.
const std::map<std::string, OpEntry>& op_table() {
  static const std::map<std::string, OpEntry> table = {
  // the pointwise ops of kernels.def (GPUMAT_UNARY, GPUMAT_BINARY, ... by shape), in every family
#define GPUMAT_KERNEL(name, params)
#define GPUMAT_UNARY(name, doc) GPUMAT_STEP(name),
#define GPUMAT_UNARY_GRADIENT(name, doc) GPUMAT_STEP(name),
#define GPUMAT_BINARY(name, doc) GPUMAT_STEP(name),
#define GPUMAT_TERNARY(name, doc) GPUMAT_STEP(name),
#define GPUMAT_UNARY_BOUNDS(name, doc) GPUMAT_STEP(name),
#define GPUMAT_UNARY_BOUNDS_GRADIENT(name, doc) GPUMAT_STEP(name),
#define GPUMAT_UNARY_SCALAR(name, doc) GPUMAT_STEP(name),
#define GPUMAT_UNARY_SCALAR_GRADIENT(name, doc) GPUMAT_STEP(name),
#include "kernels.def"
      // elementwise
      GPUMAT_STEP(fill),
      GPUMAT_STEP(add),
      GPUMAT_STEP(mul),
      GPUMAT_STEP(div),
      GPUMAT_STEP(eq),
      GPUMAT_STEP(add_scalar),
      GPUMAT_STEP(mul_scalar),
      GPUMAT_STEP(axpy),
      GPUMAT_STEP(copy),
      GPUMAT_STEP(exp),
      GPUMAT_STEP(log),
      // activation
      GPUMAT_STEP(relu),
      GPUMAT_STEP(relu_gradient),
      GPUMAT_STEP(dropout),
      GPUMAT_STEP(relu_bias_gradient),
      // layout
      GPUMAT_STEP(transpose),
      GPUMAT_STEP(reshape),
      GPUMAT_STEP(one_hot),
      // strided
      GPUMAT_STEP(broadcast_binary),
      GPUMAT_STEP(broadcast_where),
      GPUMAT_STEP(sum_to),
      GPUMAT_STEP(as_strided),
      GPUMAT_STEP(as_strided_scatter),
      GPUMAT_STEP(tril),
      GPUMAT_STEP(triu),
      // reduce
      GPUMAT_STEP(sum_to_size),
      GPUMAT_STEP(broadcast_to),
      GPUMAT_STEP(sum),
      GPUMAT_STEP(mean),
      GPUMAT_STEP(amax),
      GPUMAT_STEP(amax_gradient),
      GPUMAT_STEP(broadcast_dim),
      GPUMAT_STEP(argmax),
      GPUMAT_STEP(prod),
      GPUMAT_STEP(prod_gradient),
      GPUMAT_STEP(cumsum),
      // matmul
      GPUMAT_STEP(matmul),
      GPUMAT_STEP(matmul_bias),
      GPUMAT_STEP(bmm),
      // attention
      GPUMAT_STEP(attention),
      GPUMAT_STEP(attention_gradient),
      GPUMAT_STEP(attention_strided),
      GPUMAT_STEP(attention_strided_gradient),
      // softmax
      GPUMAT_STEP(softmax),
      GPUMAT_STEP(log_softmax),
      GPUMAT_STEP(softmax_gradient),
      GPUMAT_STEP(log_softmax_gradient),
      // loss
      GPUMAT_STEP(cross_entropy),
      GPUMAT_STEP(cross_entropy_with_gradient),
      GPUMAT_STEP(nll_loss),
      GPUMAT_STEP(nll_loss_gradient),
      GPUMAT_STEP(mse_loss),
      GPUMAT_STEP(l1_loss),
      GPUMAT_STEP(mse_loss_gradient),
      GPUMAT_STEP(l1_loss_gradient),
      // conv
      GPUMAT_STEP(conv2d),
      GPUMAT_STEP(conv2d_gradient_input),
      GPUMAT_STEP(conv2d_gradient_filter),
      GPUMAT_STEP(conv1d),
      GPUMAT_STEP(conv1d_gradient_input),
      GPUMAT_STEP(conv1d_gradient_filter),
      GPUMAT_STEP(add_channel_bias),
      GPUMAT_STEP(reduce_sum_channels),
      // pool
      GPUMAT_STEP(max_pool2d),
      GPUMAT_STEP(max_pool2d_gradient),
      GPUMAT_STEP(avg_pool2d),
      GPUMAT_STEP(avg_pool2d_gradient),
      GPUMAT_STEP(adaptive_avg_pool2d),
      GPUMAT_STEP(adaptive_avg_pool2d_gradient),
      // rnn
      GPUMAT_STEP(lstm_cell),
      GPUMAT_STEP(lstm_cell_gradient),
      GPUMAT_STEP(gru_cell),
      GPUMAT_STEP(gru_cell_gradient),
      // random
      GPUMAT_STEP(uniform),
      GPUMAT_STEP(normal),
      GPUMAT_STEP(randint),
      // sort
      GPUMAT_STEP(argsort),
      GPUMAT_STEP(gather),
      GPUMAT_STEP(gather_gradient),
      // optim
      GPUMAT_STEP(adam_update),
      // index
      GPUMAT_STEP(index_select),
      GPUMAT_STEP(index_add),
      GPUMAT_STEP(index_copy),
      // norm
      GPUMAT_STEP(layer_norm),
      GPUMAT_STEP(layer_norm_stats),
      GPUMAT_STEP(layer_norm_gradient),
      GPUMAT_STEP(layer_norm_weight_gradient),
      GPUMAT_STEP(layer_norm_backward),
      GPUMAT_STEP(batch_norm_stats),
      GPUMAT_STEP(batch_norm),
      GPUMAT_STEP(batch_norm_gradient),
      GPUMAT_STEP(batch_norm_weight_gradient),
  };
  return table;
}

#undef GPUMAT_STEP

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
  const DeviceRuntime& rt = runtime_for(device_);
  // A workspace reallocated since the capture: the graph would write into the freed block. The
  // workspaces only grow, so capturing again (not a move of the inputs) settles it.
  if (graph_ != nullptr && rt.workspace_generation(device_.index) != captured_workspaces_) drop_graph();
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
    // Captured calls run nothing yet (and count when the graph launches): take their counts back.
    const int64_t ops_before = ops::op_count(device_);
    auto uncount = [&] { ops::count_ops(device_, ops_before - ops::op_count(device_)); };
    const uint64_t workspaces = rt.workspace_generation(device_.index);
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
    captured_workspaces_ = workspaces;
    ++captures_;
  }
  if (!rt.graph_launch(device_.index, graph_, captured_workspaces_)) {
    // Another thread reallocated a workspace since the check above: capture again next run.
    drop_graph();
    return run_eager(step);
  }
  ops::count_ops(device_, static_cast<int64_t>(steps_.size()));
  ++graph_launches_;
  last_was_graph_ = true;
}

}  // namespace gpumat
