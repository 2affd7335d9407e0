#include "core/text/text_encoder_config.h"

#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Rejects RoPE variants other than the default one (rope_scaling / rope_parameters.rope_type).
absl::Status CheckDefaultRope(const Json& lm, absl::string_view source) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = lm.find(key);
    if (it == lm.end() || it->is_null() || !it->is_object()) continue;
    std::string type = "default";
    for (const char* type_key : {"rope_type", "type"}) {
      auto t = it->find(type_key);
      if (t != it->end() && t->is_string()) type = t->get<std::string>();
    }
    if (type != "default") {
      return absl::UnimplementedError(
          absl::StrCat(source, ": ", key, " type '", type, "' is not supported (only default RoPE)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t TextEncoderConfig::LayerParams() const {
  int64_t attn = hidden_size * q_dim() * 2 + hidden_size * kv_dim() * 2;
  if (attention_bias) attn += q_dim() + 2 * kv_dim() + hidden_size;
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const int64_t norms = 2 * hidden_size + (qk_norm ? 2 * head_dim : 0);
  return attn + mlp + norms;
}

absl::Status TextEncoderConfig::Validate() const {
  if (model_type != "mistral" && model_type != "qwen3" && model_type != "llama") {
    return absl::UnimplementedError(
        absl::StrCat("text encoder model_type '", model_type, "' is not supported (mistral, qwen3, llama)"));
  }
  if (hidden_size <= 0 || intermediate_size <= 0 || num_hidden_layers <= 0 || num_attention_heads <= 0 ||
      num_key_value_heads <= 0 || head_dim <= 0 || vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text encoder config has a non-positive size: hidden_size=", hidden_size, " intermediate_size=",
        intermediate_size, " num_hidden_layers=", num_hidden_layers, " num_attention_heads=", num_attention_heads,
        " num_key_value_heads=", num_key_value_heads, " head_dim=", head_dim, " vocab_size=", vocab_size));
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_attention_heads ", num_attention_heads,
                                                   " is not a multiple of num_key_value_heads ", num_key_value_heads));
  }
  if (head_dim % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("head_dim ", head_dim, " is odd (RoPE)"));
  if (!(rms_norm_eps > 0) || !(rope_theta > 0) || sliding_window < 0) {
    return absl::InvalidArgumentError("rms_norm_eps and rope_theta must be positive, sliding_window ≥ 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<TextEncoderConfig> ParseTextEncoderConfig(absl::string_view json_text, absl::string_view source) {
  Json top = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded() || !top.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  TextEncoderConfig c;
  auto arch = top.find("architectures");
  if (arch != top.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string()) {
    c.architecture = (*arch)[0].get<std::string>();
  }
  std::string top_type;
  RETURN_IF_ERROR(ReadJsonField(top, "model_type", source, &top_type));
  // Mistral3ForConditionalGeneration (and other multimodal wrappers) nest the language model.
  const Json* lm = &top;
  auto text_config = top.find("text_config");
  if (text_config != top.end() && text_config->is_object()) {
    lm = &*text_config;
    if (c.architecture.empty() && top_type == "mistral3") c.architecture = "Mistral3ForConditionalGeneration";
  }
  std::string where = lm == &top ? std::string(source) : absl::StrCat(source, " text_config");
  RETURN_IF_ERROR(ReadJsonField(*lm, "model_type", where, &c.model_type));
  if (c.model_type.empty() && top_type == "mistral3") c.model_type = "mistral";
  if (c.model_type.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no model_type"));

  RETURN_IF_ERROR(RequireJsonField(*lm, "hidden_size", where, &c.hidden_size));
  RETURN_IF_ERROR(RequireJsonField(*lm, "intermediate_size", where, &c.intermediate_size));
  RETURN_IF_ERROR(RequireJsonField(*lm, "num_hidden_layers", where, &c.num_hidden_layers));
  RETURN_IF_ERROR(RequireJsonField(*lm, "num_attention_heads", where, &c.num_attention_heads));
  RETURN_IF_ERROR(RequireJsonField(*lm, "vocab_size", where, &c.vocab_size));
  c.num_key_value_heads = c.num_attention_heads;
  RETURN_IF_ERROR(ReadJsonField(*lm, "num_key_value_heads", where, &c.num_key_value_heads));
  if (c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  RETURN_IF_ERROR(ReadJsonField(*lm, "head_dim", where, &c.head_dim));
  RETURN_IF_ERROR(ReadJsonField(*lm, "max_position_embeddings", where, &c.max_position_embeddings));
  RETURN_IF_ERROR(ReadJsonField(*lm, "rms_norm_eps", where, &c.rms_norm_eps));
  bool found_theta = false;
  RETURN_IF_ERROR(ReadJsonField(*lm, "rope_theta", where, &c.rope_theta, &found_theta));
  auto rope_params = lm->find("rope_parameters");
  if (!found_theta && rope_params != lm->end() && rope_params->is_object()) {
    RETURN_IF_ERROR(ReadJsonField(*rope_params, "rope_theta", where, &c.rope_theta));
  }
  RETURN_IF_ERROR(CheckDefaultRope(*lm, where));
  std::string act = "silu";
  RETURN_IF_ERROR(ReadJsonField(*lm, "hidden_act", where, &act));
  if (act != "silu") {
    return absl::UnimplementedError(absl::StrCat(where, ": hidden_act '", act, "' is not supported (silu)"));
  }
  RETURN_IF_ERROR(ReadJsonField(*lm, "attention_bias", where, &c.attention_bias));

  if (c.model_type == "mistral") {
    // transformers' MistralConfig defaults sliding_window to 4096; an explicit null disables it.
    auto it = lm->find("sliding_window");
    if (it == lm->end()) {
      c.sliding_window = 4096;
    } else if (!it->is_null()) {
      RETURN_IF_ERROR(ReadJsonField(*lm, "sliding_window", where, &c.sliding_window));
    }
  } else if (c.model_type == "qwen3") {
    c.qk_norm = true;
    bool use_sliding = false;
    RETURN_IF_ERROR(ReadJsonField(*lm, "use_sliding_window", where, &use_sliding));
    if (use_sliding) {
      return absl::UnimplementedError(absl::StrCat(where, ": Qwen3 use_sliding_window=true is not supported"));
    }
  }
  if (c.architecture.empty()) {
    c.architecture = c.model_type == "qwen3"   ? "Qwen3ForCausalLM"
                     : c.model_type == "llama" ? "LlamaForCausalLM"
                                               : "MistralForCausalLM";
  }
  RETURN_IF_ERROR(Annotate(c.Validate(), where));
  return c;
}

absl::StatusOr<TextEncoderConfig> LoadTextEncoderConfig(const std::string& config_json_path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(config_json_path));
  return ParseTextEncoderConfig(text, config_json_path);
}

std::string TextEncoderConfigToJson(const TextEncoderConfig& c) {
  OrderedJson lm;
  lm["model_type"] = c.model_type;
  lm["hidden_size"] = c.hidden_size;
  lm["intermediate_size"] = c.intermediate_size;
  lm["num_hidden_layers"] = c.num_hidden_layers;
  lm["num_attention_heads"] = c.num_attention_heads;
  lm["num_key_value_heads"] = c.num_key_value_heads;
  lm["head_dim"] = c.head_dim;
  lm["vocab_size"] = c.vocab_size;
  lm["max_position_embeddings"] = c.max_position_embeddings;
  lm["rms_norm_eps"] = c.rms_norm_eps;
  lm["rope_theta"] = c.rope_theta;
  lm["hidden_act"] = "silu";
  lm["attention_dropout"] = 0.0;
  lm["attention_bias"] = c.attention_bias;
  if (c.model_type == "mistral") {
    lm["sliding_window"] = c.sliding_window > 0 ? OrderedJson(c.sliding_window) : OrderedJson(nullptr);
  }
  if (c.model_type == "qwen3") {
    lm["use_sliding_window"] = false;
    lm["sliding_window"] = nullptr;
    lm["max_window_layers"] = c.num_hidden_layers;
  }
  lm["tie_word_embeddings"] = false;
  lm["torch_dtype"] = "bfloat16";
  if (!c.is_mistral3()) {
    OrderedJson j;
    j["architectures"] = OrderedJson::array({c.architecture.empty() ? "Qwen3ForCausalLM" : c.architecture});
    for (auto& [k, v] : lm.items()) j[k] = v;
    return j.dump(2) + "\n";
  }
  OrderedJson j;
  j["architectures"] = OrderedJson::array({"Mistral3ForConditionalGeneration"});
  j["model_type"] = "mistral3";
  j["image_token_index"] = 10;
  j["multimodal_projector_bias"] = false;
  j["projector_hidden_act"] = "gelu";
  j["spatial_merge_size"] = 2;
  j["vision_feature_layer"] = -1;
  j["text_config"] = lm;
  // A small pixtral tower: its tensors are written beside the language model and must be ignored.
  j["vision_config"] = {{"model_type", "pixtral"}, {"hidden_size", 16},        {"intermediate_size", 32},
                        {"num_hidden_layers", 1},  {"num_attention_heads", 2}, {"head_dim", 8},
                        {"patch_size", 4},         {"image_size", 32},         {"num_channels", 3},
                        {"hidden_act", "silu"},    {"rope_theta", 10000.0}};
  j["torch_dtype"] = "bfloat16";
  return j.dump(2) + "\n";
}

TextEncoderConfig TinyMistral3TextConfig() {
  TextEncoderConfig c;
  c.model_type = "mistral";
  c.architecture = "Mistral3ForConditionalGeneration";
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 40;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 1024;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 1e9;
  return c;
}

TextEncoderConfig TinyQwen3TextConfig() {
  TextEncoderConfig c;
  c.model_type = "qwen3";
  c.architecture = "Qwen3ForCausalLM";
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 36;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 1024;
  c.max_position_embeddings = 40960;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.qk_norm = true;
  return c;
}

}  // namespace baton
