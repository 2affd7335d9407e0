#include "core/quant/stored_quant.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <nlohmann/json.hpp>

#include "core/tensor/shape.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr const char* kSideSuffixes[] = {".weight_scale", ".scale_weight",   ".input_scale",    ".scale_input",
                                         ".comfy_quant",  ".weight_scale_2", ".pre_quant_scale"};

std::string LayerOf(const std::string& weight_key) {
  return absl::EndsWith(weight_key, ".weight") ? weight_key.substr(0, weight_key.size() - 7) : weight_key;
}

// A ComfyUI per-layer record says which format the layer uses; only plain e4m3 with a tensor scale is read.
absl::Status CheckComfyQuantRecord(const SafetensorsFile& file, const std::string& weight_key) {
  const std::string record_key = LayerOf(weight_key) + ".comfy_quant";
  if (!file.Contains(record_key)) return absl::OkStatus();
  ASSIGN_OR_RETURN(at::Tensor bytes, file.Load(record_key, at::kByte));
  bytes = bytes.contiguous();
  std::string text(reinterpret_cast<const char*>(bytes.data_ptr()), bytes.numel());
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::string format = (j.is_object() && j.contains("format") && j["format"].is_string())
                           ? j["format"].get<std::string>()
                           : "<unreadable>";
  if (format != "float8_e4m3fn") {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": layer '", LayerOf(weight_key),
                                                   "' uses ComfyUI quantization format '", format,
                                                   "'; only float8_e4m3fn with a per-tensor scale is supported"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsQuantSideKey(const std::string& key) {
  if (key == "scaled_fp8") return true;
  for (const char* suffix : kSideSuffixes) {
    if (absl::EndsWith(key, suffix)) return true;
  }
  return false;
}

bool IsEightBitDtype(const std::string& code) { return code == "I8" || code == "F8_E4M3" || code == "F8_E5M2"; }

std::vector<std::string> ScaleKeyCandidates(const std::string& weight_key) {
  const std::string layer = LayerOf(weight_key);
  return {layer + ".weight_scale", layer + ".scale_weight"};
}

absl::StatusOr<std::pair<at::Tensor, at::Tensor>> LoadEightBitWeight(const SafetensorsFile& file,
                                                                     const std::string& weight_key,
                                                                     const SafetensorsFile& scale_file,
                                                                     const std::string& scale_key) {
  ASSIGN_OR_RETURN(SafetensorsEntry entry, file.Entry(weight_key));
  const std::string where = absl::StrCat(file.path(), ": tensor '", weight_key, "'");
  if (entry.dtype == "F8_E5M2") {
    return absl::InvalidArgumentError(absl::StrCat(where, " is float8_e5m2; only float8_e4m3fn and int8 are read"));
  }
  if (entry.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": 8-bit weights must be 2-D, got ", ShapeString(entry.shape)));
  }
  RETURN_IF_ERROR(CheckComfyQuantRecord(file, weight_key));
  ASSIGN_OR_RETURN(at::Tensor scale, scale_file.Load(scale_key, at::kFloat));
  const int64_t rows = entry.shape[0];
  if (scale.numel() == 1 && scale.dim() <= 1) {
    scale = scale.reshape({1}).expand({rows}).contiguous();  // per tensor → per row
  } else if (scale.dim() != 1 || scale.size(0) != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        scale_file.path(), ": scale '", scale_key, "' has shape ", ShapeString(scale.sizes()),
        "; only a per-tensor ([] or [1]) or per-row ([", rows, "]) scale is supported (block-wise scales are not)"));
  }
  ASSIGN_OR_RETURN(at::Tensor data, file.Load(weight_key));
  return std::make_pair(std::move(data), std::move(scale));
}

}  // namespace baton
