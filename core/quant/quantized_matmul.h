// x · Wᵀ for an 8-bit frozen weight W = data · scale[row], with an autograd node that keeps the 8-bit data,
// not the dequantized W: a plain matmul would save its full-precision operand for backward, so a stage
// trained without recompute would hold a full-precision copy of every layer's weight until backward. Here the
// backward dequantizes again (one layer at a time). Forward values are bitwise those of
// at::matmul(x, DequantizeWeight(data, scale, dtype).t()).
#pragma once

#include <ATen/ATen.h>

namespace baton {

// x [..., in] in `dtype`, data [out, in] int8 | float8_e4m3fn, scale [out] fp32 → [..., out] in `dtype`.
// Gradients flow to x only (the weight is frozen).
at::Tensor QuantizedMatmul(const at::Tensor& x, const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype);

}  // namespace baton
