#include "wire/wire_compression.h"

#include <absl/strings/str_cat.h>

#include <cmath>

#include "core/util/status.h"
#include "wire/wire.h"

namespace baton {
namespace {

constexpr float kFp8Max = 448.0f;  // largest finite float8 e4m3fn

bool IsFloating(at::ScalarType t) { return at::isFloatingType(t); }

}  // namespace

absl::StatusOr<WireDtype> ParseWireDtype(absl::string_view text) {
  if (text == "none") return WireDtype::kNone;
  if (text == "bf16") return WireDtype::kBf16;
  if (text == "fp8") return WireDtype::kFp8;
  return absl::InvalidArgumentError(absl::StrCat("wire_dtype: '", text, "' is not one of none, bf16, fp8"));
}

std::string WireDtypeName(WireDtype d) {
  switch (d) {
    case WireDtype::kNone:
      return "none";
    case WireDtype::kBf16:
      return "bf16";
    case WireDtype::kFp8:
      return "fp8";
  }
  return "none";
}

WirePayload CompressForWire(const at::Tensor& tensor, WireDtype dtype) {
  WirePayload out;
  out.payload = tensor;
  const at::ScalarType from = tensor.scalar_type();
  if (dtype == WireDtype::kNone || !IsFloating(from) || tensor.numel() == 0 || tensor.dim() == 0) return out;
  if (dtype == WireDtype::kBf16) {
    if (c10::elementSize(from) <= 2) return out;
    out.payload = tensor.to(at::kBFloat16);
  } else {
    at::Tensor rows = tensor.reshape({-1, tensor.size(-1)}).to(at::kFloat);
    at::Tensor scale = rows.abs().amax(/*dim=*/1).div_(kFp8Max);
    // A row fp8 cannot scale (inf or NaN, or an fp64 value beyond fp32's range) has no finite scale, which the
    // receiver refuses: such a tensor travels exactly (a fuzz finding).
    if (!at::isfinite(scale).all().item<bool>()) return out;
    scale = at::where(scale > 0, scale, at::ones_like(scale));  // an all-zero row stays exact
    out.payload = rows.div(scale.unsqueeze(1)).to(at::kFloat8_e4m3fn).reshape(tensor.sizes()).contiguous();
    out.row_scales = scale.contiguous();
  }
  out.decode_dtype = *TorchToWireDType(from);
  return out;
}

absl::StatusOr<uint64_t> DecodedBytes(const v1::TensorHeader& header, uint64_t payload_bytes) {
  if (header.decode_dtype() == v1::DTYPE_UNSPECIFIED) return payload_bytes;
  ASSIGN_OR_RETURN(at::ScalarType payload, WireDTypeToTorch(header.dtype()));
  ASSIGN_OR_RETURN(at::ScalarType decoded, WireDTypeToTorch(header.decode_dtype()));
  return payload_bytes / c10::elementSize(payload) * c10::elementSize(decoded);
}

absl::StatusOr<at::Tensor> DecompressFromWire(const v1::TensorHeader& header, at::Tensor payload) {
  const bool has_scales = header.row_scales_size() > 0;
  if (header.decode_dtype() == v1::DTYPE_UNSPECIFIED) {
    if (has_scales) return absl::InvalidArgumentError("row_scales without decode_dtype");
    return payload;
  }
  ASSIGN_OR_RETURN(at::ScalarType decoded, WireDTypeToTorch(header.decode_dtype()));
  if (!IsFloating(decoded) || !IsFloating(payload.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat("decode_dtype ", c10::toString(decoded), " from a ",
                                                   c10::toString(payload.scalar_type()),
                                                   " payload: compression is for floating tensors only"));
  }
  const bool fp8 = payload.scalar_type() == at::kFloat8_e4m3fn;
  if (!fp8) {
    if (has_scales) return absl::InvalidArgumentError("row_scales are only valid with an fp8 payload");
    return payload.to(decoded);
  }
  if (payload.dim() == 0) return absl::InvalidArgumentError("an fp8 payload needs at least one dimension");
  const int64_t rows = payload.size(-1) == 0 ? 0 : payload.numel() / payload.size(-1);
  if (header.row_scales_size() != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 payload has ", rows, " rows but ", header.row_scales_size(), " row_scales"));
  }
  for (float s : header.row_scales()) {
    if (!std::isfinite(s) || s < 0) return absl::InvalidArgumentError(absl::StrCat("row scale ", s, " is not >= 0"));
  }
  at::Tensor scale = at::from_blob(const_cast<float*>(header.row_scales().data()), {rows}, at::kFloat);
  at::Tensor values = payload.reshape({rows, -1}).to(at::kFloat).mul_(scale.unsqueeze(1));
  return values.reshape(payload.sizes()).to(decoded);
}

}  // namespace baton
