// The optim family's ops (gpumat/ops.h): adam_update, sgd_update, momentum_sgd_update,
// adam_update_multi, adadelta_update_multi, total_norm_multi, clip_scale_multi. Checks here and in checks.h;
// kernels in ../cuda/optim.cu and
// ../host/optim.cpp.
#include "gpumat/ops.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "checks.h"

namespace gpumat::ops {

namespace {

// Adam's hyper-parameter checks (adam_update, adam_update_multi); returns the bias corrections
// 1 - beta1^step and 1 - beta2^step. NOTE: computed in double: beta^t underflows gracefully to 0
// for large t.
std::pair<float, float> adam_bias_corrections(const char* op, float lr, float beta1, float beta2, float eps,
                                              int64_t step) {
  if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f))
    throw ShapeError(std::string(op) + ": beta1 and beta2 must be in [0, 1), got " + std::to_string(beta1) +
                     " and " + std::to_string(beta2));
  if (!(lr >= 0.0f) || !std::isfinite(lr) || !(eps >= 0.0f) || !std::isfinite(eps))
    throw ShapeError(std::string(op) + ": lr and eps must be finite and >= 0, got " + std::to_string(lr) +
                     " and " + std::to_string(eps));
  if (step < 1) throw ShapeError(std::string(op) + ": step must be >= 1, got " + std::to_string(step));
  return {static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step))),
          static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step)))};
}

void check_lr(const char* op, float lr) {
  if (!(lr >= 0.0f) || !std::isfinite(lr))
    throw ShapeError(std::string(op) + ": lr must be finite and >= 0, got " + std::to_string(lr));
}

void check_weight_decay(const char* op, float weight_decay) {
  if (!(weight_decay >= 0.0f) || !std::isfinite(weight_decay))
    throw ShapeError(std::string(op) + ": weight_decay must be finite and >= 0, got " +
                     std::to_string(weight_decay));
}

// Partial results per tensor of total_norm_multi's first CUDA pass (its grid's x extent).
constexpr int64_t kNormParts = 64;

}  // namespace

void adam_update(GpuMatrix& param, const GpuMatrix& grad, GpuMatrix& m, GpuMatrix& v, float lr, float beta1,
                 float beta2, float eps, int64_t step) {
  const char* op = "adam_update";
  const Backend& be = same_device(op, param, grad, m, v);
  same_shape(op, param, grad);
  same_shape(op, param, m);
  same_shape(op, param, v);
  if (param.size() > 0) {
    const float* ptrs[4] = {param.data(), grad.data(), m.data(), v.data()};
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j)
        if (ptrs[i] == ptrs[j])
          throw ShapeError(std::string(op) + ": param, grad, m and v must be four different arrays (shape " +
                           param.shape_str() + ")");
  }
  const auto [bc1, bc2] = adam_bias_corrections(op, lr, beta1, beta2, eps, step);
  if (param.size() > 0)
    be.adam_update(param.device().index, param.data(), grad.data(), m.data(), v.data(), param.size(), lr,
                   beta1, beta2, eps, bc1, bc2);
  finish(param);
}

void sgd_update(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads, float lr,
                float weight_decay) {
  const char* op = "sgd_update";
  check_lr(op, lr);
  check_weight_decay(op, weight_decay);
  const std::vector<int64_t> n = check_tensor_lists(op, {tensor_list("parameter", "parameters", params, true),
                                                         tensor_list("gradient", "gradients", grads, false)});
  if (n.empty()) return;
  const std::vector<float*> p = data_of(params), g = data_of(grads);
  backend_for(params[0]->device())
      .sgd_update_multi(params[0]->device().index, p.data(), g.data(), n.data(), static_cast<int>(n.size()),
                        lr, weight_decay);
  finish(*params[0]);
}

void momentum_sgd_update(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads,
                         const std::vector<GpuMatrix*>& velocities, float lr, float momentum, float dampening,
                         float weight_decay, bool nesterov) {
  const char* op = "momentum_sgd_update";
  check_lr(op, lr);
  check_weight_decay(op, weight_decay);
  if (!(momentum >= 0.0f && momentum < 1.0f))
    throw ShapeError(std::string(op) + ": momentum must be in [0, 1), got " + std::to_string(momentum));
  if (!(dampening >= 0.0f && dampening <= 1.0f))
    throw ShapeError(std::string(op) + ": dampening must be in [0, 1], got " + std::to_string(dampening));
  const std::vector<int64_t> n =
      check_tensor_lists(op, {tensor_list("parameter", "parameters", params, true),
                              tensor_list("gradient", "gradients", grads, false),
                              tensor_list("velocity", "velocities", velocities, true)});
  if (n.empty()) return;
  const std::vector<float*> p = data_of(params), g = data_of(grads), v = data_of(velocities);
  backend_for(params[0]->device())
      .momentum_sgd_update_multi(params[0]->device().index, p.data(), g.data(), v.data(), n.data(),
                                 static_cast<int>(n.size()), lr, momentum, dampening, weight_decay, nesterov);
  finish(*params[0]);
}

void adam_update_multi(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads,
                       const std::vector<GpuMatrix*>& m, const std::vector<GpuMatrix*>& v, float lr,
                       float beta1, float beta2, float eps, int64_t step, float weight_decay, bool decoupled,
                       const std::vector<GpuMatrix*>& max_v) {
  const char* op = "adam_update_multi";
  const auto [bc1, bc2] = adam_bias_corrections(op, lr, beta1, beta2, eps, step);
  check_weight_decay(op, weight_decay);
  std::vector<TensorList> lists = {tensor_list("parameter", "parameters", params, true),
                                   tensor_list("gradient", "gradients", grads, false),
                                   tensor_list("m", "m arrays", m, true),
                                   tensor_list("v", "v arrays", v, true)};
  // An empty max_v is no AMSGrad; any other length must match (check_tensor_lists says so).
  if (!max_v.empty()) lists.push_back(tensor_list("max_v", "max_v arrays", max_v, true));
  const std::vector<int64_t> n = check_tensor_lists(op, lists);
  if (n.empty()) return;
  const std::vector<float*> p = data_of(params), g = data_of(grads), pm = data_of(m), pv = data_of(v),
                            pmax = data_of(max_v);
  backend_for(params[0]->device())
      .adam_update_multi(params[0]->device().index, p.data(), g.data(), pm.data(), pv.data(),
                         max_v.empty() ? nullptr : pmax.data(), n.data(), static_cast<int>(n.size()), lr,
                         beta1, beta2, eps, bc1, bc2, weight_decay, decoupled);
  finish(*params[0]);
}

void total_norm_multi(const std::vector<const GpuMatrix*>& xs, float norm_type, GpuMatrix& out) {
  const char* op = "total_norm_multi";
  if (!(norm_type > 0.0f) || std::isnan(norm_type))
    throw ShapeError(std::string(op) + ": norm_type must be > 0 (inf for the max norm), got " +
                     std::to_string(norm_type));
  if (out.size() != 1)
    throw ShapeError(std::string(op) + ": out must hold one element, got shape " + out.shape_str());
  // The inputs are read-only lists of their own shapes: check them one by one against out's device
  // (and that out overlaps none).
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i] == nullptr) throw ShapeError(std::string(op) + ": array " + std::to_string(i) + " is null");
    if (xs[i]->device() != out.device())
      throw ShapeError(std::string(op) + ": array " + std::to_string(i) + " is on " + xs[i]->device().str() +
                       ", out on " + out.device().str());
    if (xs[i]->size() > 0 && xs[i]->data() == out.data())
      throw ShapeError(std::string(op) + ": out must not be one of the arrays (shape " + xs[i]->shape_str() +
                       ")");
  }
  const Backend& be = backend_for(out.device());
  std::vector<int64_t> n(xs.size());
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) total += n[i] = xs[i]->size();
  if (total == 0) {
    fill(out, 0.0f);
    return;
  }
  const std::vector<float*> x = data_of(xs);
  GpuMatrix partials({static_cast<int64_t>(xs.size()) * kNormParts}, out.device());
  be.total_norm_multi(out.device().index, x.data(), n.data(), static_cast<int>(xs.size()), norm_type,
                      partials.data(), kNormParts, out.data());
  finish(out);
}

void clip_scale_multi(const std::vector<GpuMatrix*>& xs, const GpuMatrix& total_norm, float max_norm) {
  const char* op = "clip_scale_multi";
  if (!(max_norm >= 0.0f) || !std::isfinite(max_norm))
    throw ShapeError(std::string(op) + ": max_norm must be finite and >= 0, got " + std::to_string(max_norm));
  if (total_norm.size() != 1)
    throw ShapeError(std::string(op) + ": total_norm must hold one element, got shape " +
                     total_norm.shape_str());
  const std::vector<int64_t> n = check_tensor_lists(op, {tensor_list("array", "arrays", xs, true)});
  if (n.empty()) return;
  if (xs[0]->device() != total_norm.device())
    throw ShapeError(std::string(op) + ": the arrays are on " + xs[0]->device().str() + ", total_norm on " +
                     total_norm.device().str());
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i]->size() > 0 && xs[i]->data() == total_norm.data())
      throw ShapeError(std::string(op) + ": total_norm must not be one of the arrays");
  const std::vector<float*> x = data_of(xs);
  backend_for(total_norm.device())
      .clip_scale_multi(total_norm.device().index, x.data(), n.data(), static_cast<int>(n.size()),
                        total_norm.data(), max_norm);
  finish(*xs[0]);
}

void adadelta_update_multi(const std::vector<GpuMatrix*>& params, const std::vector<const GpuMatrix*>& grads,
                           const std::vector<GpuMatrix*>& square_avgs,
                           const std::vector<GpuMatrix*>& acc_deltas, float lr, float rho, float eps) {
  const char* op = "adadelta_update_multi";
  check_lr(op, lr);
  if (!(rho >= 0.0f && rho <= 1.0f))
    throw ShapeError(std::string(op) + ": rho must be in [0, 1], got " + std::to_string(rho));
  // NOTE: eps > 0, not PyTorch's eps >= 0: with eps = 0 the first step divides 0 by 0 wherever a
  // gradient is 0 (sqrt(acc + eps) / sqrt(sq + eps) with acc = sq = 0) and NaN spreads.
  if (!(eps > 0.0f) || !std::isfinite(eps))
    throw ShapeError(std::string(op) + ": eps must be finite and > 0, got " + std::to_string(eps));
  const std::vector<int64_t> n =
      check_tensor_lists(op, {tensor_list("parameter", "parameters", params, true),
                              tensor_list("gradient", "gradients", grads, false),
                              tensor_list("square_avg", "square_avgs", square_avgs, true),
                              tensor_list("acc_delta", "acc_deltas", acc_deltas, true)});
  if (n.empty()) return;
  const std::vector<float*> p = data_of(params), g = data_of(grads), sq = data_of(square_avgs),
                            acc = data_of(acc_deltas);
  backend_for(params[0]->device())
      .adadelta_update_multi(params[0]->device().index, p.data(), g.data(), sq.data(), acc.data(), n.data(),
                             static_cast<int>(n.size()), lr, rho, eps);
  finish(*params[0]);
}

}  // namespace gpumat::ops
