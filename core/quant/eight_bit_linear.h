// Inference-only x·Wᵀ (+ b) for a frozen 8-bit weight (QuantizedWeight), as the text encoders run their Linears:
// no autograd node, the weight dequantized for the one call and dropped. On CPU the dequantization is one pass
// through a 256-entry table (bitwise DequantizeWeight's fp32 q·s cast once, at a fraction of its cost), then the
// compute dtype's own GEMM; or, for int8 weights and bf16 activations, libtorch's weight-only int8 GEMM
// (at::_weight_int8pack_mm). BENCHMARKS.md "bench_encoder_quant" measures both; dequantize is the default.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <string>

#include "core/quant/quantize_tensor.h"

namespace baton {

enum class EightBitGemm {
  kDequantize,  // table dequantization to x's dtype, then at::linear (any device, dtype and 8-bit kind)
  kInt8Pack,    // at::_weight_int8pack_mm where it applies (CPU, int8 data, bf16 x), else kDequantize
};

// Process-wide choice (set once at start-up, before any encoding; not synchronized with running calls).
void SetEightBitGemm(EightBitGemm gemm);
EightBitGemm GetEightBitGemm();
// "dequantize" | "int8pack"; anything else is InvalidArgument naming the allowed values.
absl::StatusOr<EightBitGemm> ParseEightBitGemm(const std::string& name);

// data [out, in] int8 | float8_e4m3fn, scale [out] fp32 → [out, in] in `dtype`, bitwise equal to
// DequantizeWeight(data, scale, dtype). CPU tensors go through the table; others through DequantizeWeight.
at::Tensor DequantizeWeightFast(const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype);

// x [..., in] (a floating dtype) · (w.data · w.scale[row])ᵀ + bias ([out] or undefined) → [..., out] in x's
// dtype. Runs under whatever grad mode the caller has, but records no gradient for the weight.
at::Tensor EightBitLinear(const at::Tensor& x, const QuantizedWeight& w, const at::Tensor& bias = at::Tensor());

}  // namespace baton
