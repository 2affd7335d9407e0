// The forward math of the adapter types beyond plain LoRA (adapter_type.h), as pure functions of tensors so that
// autograd gives their gradients. Each equals peft's layer (LoHa, LoKr, LoRA with use_dora) up to summation order.
#pragma once

#include <ATen/ATen.h>

namespace baton {

// LoHa's ΔW [out, in] = scale·(w1a·w1b) ⊙ (w2a·w2b).
at::Tensor LohaDeltaWeight(const at::Tensor& w1a, const at::Tensor& w1b, const at::Tensor& w2a, const at::Tensor& w2b,
                           double scale);

// LoKr's x·ΔWᵀ for ΔW = scale·kron(w1, w2) without building ΔW: x [..., in_m·in_n] viewed as [..., in_m, in_n],
// w1 [out_l, in_m], w2 [out_k, in_n]: w1·X·w2ᵀ flattened to [..., out_l·out_k].
at::Tensor LokrDelta(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2, double scale);

// DoRA's output y = base + (m/n − 1)·base_dropped + (m/n)·scale·(x_dropped·Aᵀ·Bᵀ), n = ‖W + scale·B·A‖ per output
// row with B·A detached and n itself detached (the DoRA paper's §4.3, peft). base = x·Wᵀ; base_dropped is the same
// for the dropout-masked input (base itself without dropout). W [out, in] frozen, magnitude [out], all in one dtype.
at::Tensor DoraOutput(const at::Tensor& base, const at::Tensor& base_dropped, const at::Tensor& x_dropped,
                      const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, const at::Tensor& magnitude,
                      double scale);

// DoRA's initial magnitude: the row norms ‖W‖ (B = 0 at init), fp32 [out].
at::Tensor DoraInitialMagnitude(const at::Tensor& w);

}  // namespace baton
