// Hand-written autograd for LoraLinear on the oneDNN path (cpu_linear.h): y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ with W frozen.
// Written out rather than left to autograd over at::matmul so that (a) the two big GEMMs of a frozen Linear —
// x·Wᵀ forward and dy·W backward — both run through oneDNN, (b) the adapter's delta is added inside the
// forward GEMM (oneDNN post-op) and the adapter's dx term inside the backward one, and (c) only what the
// gradients need is saved: x and s·x·Aᵀ ([.., r]), never a weight gradient. Same math as the generic path
// up to summation order (tests: lora_test.cc, the model tests against diffusers).
#pragma once

#include <ATen/ATen.h>

namespace baton {

// x [..., in], w [out, in] frozen (never gets a gradient), lora_a [r, in], lora_b [out, r], all of x's dtype.
// Gradients flow to x (when it requires grad), lora_a and lora_b.
at::Tensor LoraLinearOnednn(const at::Tensor& x, const at::Tensor& w, const at::Tensor& lora_a,
                            const at::Tensor& lora_b, double scale);

// x·wᵀ with w frozen; the backward computes only dx = dy·w.
at::Tensor FrozenLinearOnednn(const at::Tensor& x, const at::Tensor& w);

}  // namespace baton
