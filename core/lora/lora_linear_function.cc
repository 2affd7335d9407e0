#include "core/lora/lora_linear_function.h"

#include <torch/autograd.h>

#include "core/lora/cpu_linear.h"

namespace baton {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [..., n] → [M, n] (a view when x is contiguous).
at::Tensor Rows(const at::Tensor& x) { return x.reshape({-1, x.size(-1)}); }

struct FrozenLinearFunction : public torch::autograd::Function<FrozenLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({w});
    return LinearNoBias(x, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor w = ctx->get_saved_variables()[0];
    at::Tensor dx = ctx->needs_input_grad(0) ? LinearNoBias(grads[0], w.t()) : at::Tensor();
    return {dx, at::Tensor()};
  }
};

struct LoraLinearFunction : public torch::autograd::Function<LoraLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& a,
                            const at::Tensor& b, double scale) {
    at::Tensor xa = LinearNoBias(x, a).mul_(scale);             // [..., r] = s·x·Aᵀ
    at::Tensor y = LinearNoBiasAdd(xa, b, LinearNoBias(x, w));  // s·x·Aᵀ·Bᵀ + x·Wᵀ
    ctx->save_for_backward({x, w, a, b, xa});
    ctx->saved_data["scale"] = scale;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &a = saved[2], &b = saved[3], &xa = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const at::Tensor dy = grads[0];
    at::Tensor g = LinearNoBias(dy, b.t()).mul_(scale);  // [..., r] = s·dy·B
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) dx = LinearNoBiasAdd(g, a.t(), LinearNoBias(dy, w.t()));     // dy·W + g·A
    at::Tensor da = ctx->needs_input_grad(2) ? at::mm(Rows(g).t(), Rows(x)) : at::Tensor();    // [r, in]
    at::Tensor db = ctx->needs_input_grad(3) ? at::mm(Rows(dy).t(), Rows(xa)) : at::Tensor();  // [out, r]
    return {dx, at::Tensor(), da, db, at::Tensor()};
  }
};

}  // namespace

at::Tensor LoraLinearOnednn(const at::Tensor& x, const at::Tensor& w, const at::Tensor& lora_a,
                            const at::Tensor& lora_b, double scale) {
  return LoraLinearFunction::apply(x, w, lora_a, lora_b, scale);
}

at::Tensor FrozenLinearOnednn(const at::Tensor& x, const at::Tensor& w) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return LinearNoBias(x, w);
  return FrozenLinearFunction::apply(x, w);
}

}  // namespace baton
