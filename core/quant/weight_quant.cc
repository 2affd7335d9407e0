#include "core/quant/weight_quant.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

namespace baton {

absl::StatusOr<WeightQuant> ParseWeightQuant(absl::string_view text) {
  if (text == "none") return WeightQuant::kNone;
  if (text == "int8") return WeightQuant::kInt8;
  if (text == "fp8") return WeightQuant::kFp8;
  return absl::InvalidArgumentError(absl::StrCat("quantize: '", text, "' is not one of none, int8, fp8"));
}

std::string WeightQuantName(WeightQuant q) {
  switch (q) {
    case WeightQuant::kNone:
      return "none";
    case WeightQuant::kInt8:
      return "int8";
    case WeightQuant::kFp8:
      return "fp8";
  }
  return "none";
}

bool IsQuantizedFlux2Param(absl::string_view name, const std::vector<int64_t>& shape) {
  if (shape.size() != 2 || !absl::EndsWith(name, ".weight")) return false;
  if (absl::StrContains(name, "lora_")) return false;
  return absl::StartsWith(name, "transformer_blocks.") || absl::StartsWith(name, "single_transformer_blocks.");
}

int64_t FrozenParamBytes(const std::vector<int64_t>& shape, bool quantized, int compute_bytes) {
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  if (!quantized) return elements * compute_bytes;
  return elements + (shape.empty() ? 1 : shape[0]) * 4;
}

}  // namespace baton
