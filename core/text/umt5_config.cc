#include "core/text/umt5_config.h"

#include <absl/strings/match.h>

#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Json = nlohmann::json;

}  // namespace

bool Umt5Config::gated() const { return absl::StartsWith(feed_forward_proj, "gated-"); }

absl::StatusOr<Umt5Activation> Umt5Config::activation() const {
  if (feed_forward_proj == "gated-gelu") return Umt5Activation::kGeluTanh;  // UMT5Config: dense_act_fn gelu_new
  const std::string act = gated() ? feed_forward_proj.substr(6) : feed_forward_proj;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return Umt5Activation::kGeluTanh;
  if (act == "gelu") return Umt5Activation::kGeluErf;
  if (act == "relu") return Umt5Activation::kRelu;
  if (act == "silu" || act == "swish") return Umt5Activation::kSilu;
  return absl::UnimplementedError(absl::StrCat("umT5 feed_forward_proj '", feed_forward_proj,
                                               "' is not supported (gated-gelu, [gated-]gelu_new, gelu, relu, silu)"));
}

absl::Status Umt5Config::Validate() const {
  if (vocab_size <= 0 || d_model <= 0 || d_kv <= 0 || d_ff <= 0 || num_layers <= 0 || num_heads <= 0 ||
      relative_attention_num_buckets < 4 || relative_attention_max_distance <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "umT5 config has a bad size: vocab_size=", vocab_size, " d_model=", d_model, " d_kv=", d_kv, " d_ff=", d_ff,
        " num_layers=", num_layers, " num_heads=", num_heads, " relative_attention_num_buckets=",
        relative_attention_num_buckets, " relative_attention_max_distance=", relative_attention_max_distance));
  }
  if (!(layer_norm_epsilon > 0)) return absl::InvalidArgumentError("umT5 layer_norm_epsilon must be positive");
  return activation().status();
}

bool IsUmt5ConfigJson(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto type = j.find("model_type");
  if (type != j.end() && type->is_string() && *type == "umt5") return true;
  auto arch = j.find("architectures");
  if (arch == j.end() || !arch->is_array()) return false;
  for (const auto& a : *arch) {
    if (a.is_string() && absl::StartsWith(a.get<std::string>(), "UMT5")) return true;
  }
  return false;
}

absl::StatusOr<Umt5Config> ParseUmt5Config(absl::string_view json_text, absl::string_view source) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  if (!IsUmt5ConfigJson(json_text)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a umT5 config (model_type is not \"umt5\")"));
  }
  Umt5Config c;
  RETURN_IF_ERROR(RequireJsonField(j, "vocab_size", source, &c.vocab_size));
  RETURN_IF_ERROR(RequireJsonField(j, "d_model", source, &c.d_model));
  RETURN_IF_ERROR(RequireJsonField(j, "d_kv", source, &c.d_kv));
  RETURN_IF_ERROR(RequireJsonField(j, "d_ff", source, &c.d_ff));
  RETURN_IF_ERROR(RequireJsonField(j, "num_layers", source, &c.num_layers));
  RETURN_IF_ERROR(RequireJsonField(j, "num_heads", source, &c.num_heads));
  RETURN_IF_ERROR(ReadJsonField(j, "relative_attention_num_buckets", source, &c.relative_attention_num_buckets));
  RETURN_IF_ERROR(ReadJsonField(j, "relative_attention_max_distance", source, &c.relative_attention_max_distance));
  RETURN_IF_ERROR(ReadJsonField(j, "layer_norm_epsilon", source, &c.layer_norm_epsilon));
  RETURN_IF_ERROR(ReadJsonField(j, "feed_forward_proj", source, &c.feed_forward_proj));
  RETURN_IF_ERROR(ReadJsonField(j, "pad_token_id", source, &c.pad_token_id));
  RETURN_IF_ERROR(ReadJsonField(j, "eos_token_id", source, &c.eos_token_id));
  absl::Status valid = c.Validate();
  if (!valid.ok()) return Annotate(valid, std::string(source));
  return c;
}

absl::StatusOr<Umt5Config> LoadUmt5Config(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseUmt5Config(text, path);
}

std::string Umt5ConfigToJson(const Umt5Config& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"UMT5EncoderModel"};
  j["model_type"] = "umt5";
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["d_kv"] = c.d_kv;
  j["d_ff"] = c.d_ff;
  j["num_layers"] = c.num_layers;
  j["num_decoder_layers"] = c.num_layers;
  j["num_heads"] = c.num_heads;
  j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
  j["relative_attention_max_distance"] = c.relative_attention_max_distance;
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["feed_forward_proj"] = c.feed_forward_proj;
  j["dropout_rate"] = 0.1;
  j["is_encoder_decoder"] = true;
  j["tie_word_embeddings"] = false;
  j["pad_token_id"] = c.pad_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["decoder_start_token_id"] = c.pad_token_id;
  return j.dump(2) + "\n";
}

Umt5Config Umt5XxlConfig() {
  Umt5Config c;
  c.vocab_size = 256384;
  c.d_model = 4096;
  c.d_kv = 64;
  c.d_ff = 10240;
  c.num_layers = 24;
  c.num_heads = 64;
  return c;
}

Umt5Config TinyUmt5Config(int64_t vocab_size) {
  Umt5Config c;
  c.vocab_size = vocab_size;
  c.d_model = 32;
  c.d_kv = 8;
  c.d_ff = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  return c;
}

}  // namespace baton
