#include "core/quant/quantize_tensor.h"

#include <absl/strings/str_cat.h>
#include <c10/util/Exception.h>

#include <algorithm>

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
  // Divided by a tensor on the weight's device, never by a CPU scalar: CUDA turns `x / scalar` into
  // `x * (1 / scalar)` (one ulp away from the CPU's true division), and scales must not depend on the device.
  at::Tensor scale = w32.abs().amax(/*dim=*/1).div_(at::scalar_tensor(qmax, w32.options()));  // [out]
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
  if (dtype == at::kFloat) return data.to(at::kFloat).mul_(scale.unsqueeze(1));
  // Row tiles through fp32, each written straight into the result: the same arithmetic per element as one
  // fp32 pass (bit for bit), with an fp32 temporary of at most kDequantTileBytes instead of the whole weight.
  const int64_t rows = data.size(0), cols = data.size(1);
  const int64_t tile = std::max<int64_t>(1, kDequantTileBytes / std::max<int64_t>(1, cols * 4));
  at::Tensor out = at::empty({rows, cols}, data.options().dtype(dtype));  // [out, in] on the weight's device
  for (int64_t r = 0; r < rows; r += tile) {
    const int64_t n = std::min(tile, rows - r);
    out.narrow(0, r, n).copy_(data.narrow(0, r, n).to(at::kFloat).mul_(scale.narrow(0, r, n).unsqueeze(1)));
  }
  return out;
}

}  // namespace baton
