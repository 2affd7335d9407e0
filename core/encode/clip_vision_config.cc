#include "core/encode/clip_vision_config.h"

#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Json = nlohmann::json;

// image_size / patch_size: an int, or [h, w] with h == w (CLIP's config allows a pair; only squares are supported).
absl::Status ReadSide(const Json& j, const char* key, absl::string_view source, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (it->is_array() && it->size() == 2 && (*it)[0].is_number_integer() && (*it)[0] == (*it)[1]) {
    *out = (*it)[0].get<int64_t>();
    return absl::OkStatus();
  }
  if (it->is_array()) {
    return absl::UnimplementedError(
        absl::StrCat(source, ": field '", key, "' ", it->dump(), ": only square images and patches are supported"));
  }
  return ReadJsonField(j, key, source, out);
}

absl::StatusOr<ClipVisionConfig> FromVisionJson(const Json& j, absl::string_view source) {
  ClipVisionConfig c;
  RETURN_IF_ERROR(ReadJsonField(j, "hidden_size", source, &c.hidden_size));
  RETURN_IF_ERROR(ReadJsonField(j, "intermediate_size", source, &c.intermediate_size));
  RETURN_IF_ERROR(ReadJsonField(j, "projection_dim", source, &c.projection_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "num_hidden_layers", source, &c.num_hidden_layers));
  RETURN_IF_ERROR(ReadJsonField(j, "num_attention_heads", source, &c.num_attention_heads));
  RETURN_IF_ERROR(ReadJsonField(j, "num_channels", source, &c.num_channels));
  RETURN_IF_ERROR(ReadSide(j, "image_size", source, &c.image_size));
  RETURN_IF_ERROR(ReadSide(j, "patch_size", source, &c.patch_size));
  RETURN_IF_ERROR(ReadJsonField(j, "hidden_act", source, &c.hidden_act));
  RETURN_IF_ERROR(ReadJsonField(j, "layer_norm_eps", source, &c.layer_norm_eps));
  absl::Status valid = c.Validate();
  if (!valid.ok()) return Annotate(valid, source);
  return c;
}

}  // namespace

absl::StatusOr<ClipActivation> ClipVisionConfig::activation() const {
  if (hidden_act == "quick_gelu") return ClipActivation::kQuickGelu;
  if (hidden_act == "gelu" || hidden_act == "gelu_python") return ClipActivation::kGeluErf;
  if (hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh" || hidden_act == "gelu_fast") {
    return ClipActivation::kGeluTanh;
  }
  if (hidden_act == "relu") return ClipActivation::kRelu;
  if (hidden_act == "silu" || hidden_act == "swish") return ClipActivation::kSilu;
  return absl::UnimplementedError(
      absl::StrCat("CLIP hidden_act '", hidden_act, "' is not supported (quick_gelu, gelu, gelu_new, relu, silu)"));
}

absl::Status ClipVisionConfig::Validate() const {
  if (hidden_size <= 0 || intermediate_size <= 0 || num_hidden_layers <= 0 || num_attention_heads <= 0 ||
      num_channels <= 0 || image_size <= 0 || patch_size <= 0 || hidden_size % num_attention_heads != 0 ||
      patch_size > image_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CLIP vision config has a bad size: hidden_size=", hidden_size, " intermediate_size=", intermediate_size,
        " num_hidden_layers=", num_hidden_layers, " num_attention_heads=", num_attention_heads,
        " num_channels=", num_channels, " image_size=", image_size, " patch_size=", patch_size,
        " (hidden_size must divide by num_attention_heads, patch_size fit in image_size)"));
  }
  if (!(layer_norm_eps > 0)) return absl::InvalidArgumentError("CLIP vision layer_norm_eps must be positive");
  return activation().status();
}

absl::StatusOr<ClipVisionConfig> ParseClipVisionConfig(absl::string_view json_text, absl::string_view source) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  const std::string type = j.value("model_type", "");
  if (type == "clip") {
    // CLIPConfig: the vision tower's fields sit in vision_config (vision_config_dict, older, wins as in transformers).
    for (const char* key : {"vision_config_dict", "vision_config"}) {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) continue;
      if (!it->is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": '", key, "' is not an object"));
      return FromVisionJson(*it, absl::StrCat(source, " (", key, ")"));
    }
    return FromVisionJson(Json::object(), absl::StrCat(source, " (CLIPConfig without vision_config: defaults)"));
  }
  if (!type.empty() && type != "clip_vision_model") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model_type '", type,
                     "' is not a CLIP vision model (clip_vision_model, or clip with vision_config)"));
  }
  return FromVisionJson(j, source);
}

absl::StatusOr<ClipVisionConfig> LoadClipVisionConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseClipVisionConfig(text, path);
}

std::string ClipVisionConfigToJson(const ClipVisionConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"CLIPVisionModel"};
  j["model_type"] = "clip_vision_model";
  j["attention_dropout"] = 0.0;
  j["dtype"] = "float32";
  j["hidden_act"] = c.hidden_act;
  j["hidden_size"] = c.hidden_size;
  j["image_size"] = c.image_size;
  j["initializer_factor"] = 1.0;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_channels"] = c.num_channels;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["patch_size"] = c.patch_size;
  j["projection_dim"] = c.projection_dim;
  return j.dump(2) + "\n";
}

ClipVisionConfig ClipVitH14Config() {
  ClipVisionConfig c;
  c.hidden_size = 1280;
  c.intermediate_size = 5120;
  c.projection_dim = 1024;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 16;
  c.image_size = 224;
  c.patch_size = 14;
  c.hidden_act = "gelu";
  return c;
}

ClipVisionConfig TinyClipVisionConfig() {
  ClipVisionConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.projection_dim = 16;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.image_size = 16;
  c.patch_size = 4;
  c.hidden_act = "gelu";
  return c;
}

}  // namespace baton
