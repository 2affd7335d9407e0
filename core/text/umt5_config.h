// Configuration of Wan's text encoder, umT5 (transformers' UMT5EncoderModel), read from a diffusers Wan
// pipeline's `text_encoder/config.json` (model_type "umt5"). Only the encoder stack's fields are kept;
// feed-forward variants other than those transformers' UMT5Config accepts are rejected by name.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>

namespace baton {

// The feed-forward's activation, as transformers' ACT2FN names it.
enum class Umt5Activation { kGeluTanh, kGeluErf, kRelu, kSilu };

struct Umt5Config {
  std::string model_type = "umt5";
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t d_kv = 0;
  int64_t d_ff = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  std::string feed_forward_proj = "gated-gelu";  // "gated-ACT" (wi_0, wi_1) or "ACT" (wi)
  int64_t pad_token_id = 0;
  int64_t eos_token_id = 1;

  int64_t inner_dim() const { return num_heads * d_kv; }
  bool gated() const;
  // "gated-gelu" means gelu_new (tanh), as UMT5Config rewrites it; a bare "gelu" is the exact (erf) GELU.
  absl::StatusOr<Umt5Activation> activation() const;
  absl::Status Validate() const;
};

// True when `config_json_text` is a umT5 config (model_type "umt5" or an architectures entry starting
// with "UMT5"), so `baton text-encode` can tell Wan's text encoder from FLUX.2's.
bool IsUmt5ConfigJson(absl::string_view config_json_text);

absl::StatusOr<Umt5Config> ParseUmt5Config(absl::string_view json_text, absl::string_view source);
absl::StatusOr<Umt5Config> LoadUmt5Config(const std::string& config_json_path);
// A config.json UMT5EncoderModel.from_pretrained reads back as `config`.
std::string Umt5ConfigToJson(const Umt5Config& config);

// umT5-XXL as Wan ships it (d_model 4096, 24 layers, 64 heads of 64, d_ff 10240, vocabulary 256384).
Umt5Config Umt5XxlConfig();
// A tiny stand-in: d_model 32, 2 layers, 4 heads of 8, d_ff 48, vocabulary `vocab_size`.
Umt5Config TinyUmt5Config(int64_t vocab_size = 512);

}  // namespace baton
