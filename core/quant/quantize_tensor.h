// 8-bit storage of one frozen Linear weight and its way back to the compute dtype.
// Symmetric, per output channel (row): int8 keeps round(w / s) with s = max|w_row| / 127; float8 e4m3fn keeps
// (w / s) rounded to the nearest e4m3 value with s = max|w_row| / 448 (e4m3's largest finite value). The
// scale is fp32 [out] either way, so dequantization is one multiply per element: w ≈ q · s[row].
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include "core/quant/weight_quant.h"

namespace baton {

struct QuantizedWeight {
  at::Tensor data;   // [out, in] int8 (kInt8) or float8_e4m3fn (kFp8)
  at::Tensor scale;  // [out] fp32
};

// The 8-bit dtype that stores `q` (kChar or kFloat8_e4m3fn); CHECK-fails for kNone.
at::ScalarType QuantStorageDtype(WeightQuant q);
// kInt8 for int8 storage, kFp8 for float8_e4m3fn, InvalidArgument for anything else (names the dtype).
absl::StatusOr<WeightQuant> QuantOfStorageDtype(at::ScalarType dtype);

// Quantizes a 2-D weight of any float dtype. The arithmetic is fp32 whatever the input dtype, so a bf16 and
// an fp32 copy of the same bf16 values quantize bitwise alike (on-the-fly vs `baton quantize`). An all-zero
// row gets scale 0 and zeros. `q` must not be kNone.
QuantizedWeight QuantizeWeight(const at::Tensor& w, WeightQuant q);

// data [out, in] 8-bit, scale [out] fp32 → [out, in] in `dtype`, computed as fp32 q·s then cast once, in row tiles
// of at most kDequantTileBytes of fp32 (weight_quant.h): the only whole-weight tensor made is the result.
at::Tensor DequantizeWeight(const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype);

}  // namespace baton
