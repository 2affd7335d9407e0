#include "core/quant/quantize_tensor.h"

#include <absl/strings/str_cat.h>
#include <c10/util/Exception.h>

namespace baton {
namespace {

constexpr double kInt8Max = 127.0;
constexpr double kFp8E4m3Max = 448.0;

}  // namespace

at::ScalarType QuantStorageDtype(WeightQuant q) {
  TORCH_CHECK(q != WeightQuant::kNone, "QuantStorageDtype: quantize is none");
  return q == WeightQuant::kInt8 ? at::kChar : at::kFloat8_e4m3fn;
}

absl::StatusOr<WeightQuant> QuantOfStorageDtype(at::ScalarType dtype) {
  if (dtype == at::kChar) return WeightQuant::kInt8;
  if (dtype == at::kFloat8_e4m3fn) return WeightQuant::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("8-bit weights must be int8 or float8_e4m3fn, not ", c10::toString(dtype)));
}

QuantizedWeight QuantizeWeight(const at::Tensor& w, WeightQuant q) {
  TORCH_CHECK(w.dim() == 2, "QuantizeWeight: expected a 2-D weight, got ", w.dim(), "-D");
  const at::Tensor w32 = w.to(at::kFloat);
  const double qmax = q == WeightQuant::kInt8 ? kInt8Max : kFp8E4m3Max;
  at::Tensor scale = w32.abs().amax(/*dim=*/1).div_(qmax);  // [out]
  // A zero row keeps scale 0 (its dequantized values are exact zeros); divide by 1 there instead of 0.
  const at::Tensor divisor = at::where(scale > 0, scale, at::ones_like(scale)).unsqueeze(1);
  at::Tensor scaled = w32 / divisor;
  QuantizedWeight out;
  if (q == WeightQuant::kInt8) {
    out.data = scaled.round_().clamp_(-kInt8Max, kInt8Max).to(at::kChar);  // round half to even
  } else {
    out.data = scaled.clamp_(-kFp8E4m3Max, kFp8E4m3Max).to(at::kFloat8_e4m3fn);  // round to nearest e4m3
  }
  out.scale = std::move(scale);
  return out;
}

at::Tensor DequantizeWeight(const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype) {
  at::Tensor w = data.to(at::kFloat).mul_(scale.unsqueeze(1));
  return dtype == at::kFloat ? w : w.to(dtype);
}

}  // namespace baton
