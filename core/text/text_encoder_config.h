// Configuration of FLUX.2's text encoders, read from a Hugging Face `text_encoder/config.json`: the
// Llama-style language model of Mistral-Small-3.1 (nested under `text_config` of a
// Mistral3ForConditionalGeneration config, model_type "mistral") or Qwen3 (flat, model_type "qwen3").
// Only what the decoder stack needs is kept; unsupported variants (rope scaling, non-SiLU MLPs, Qwen3
// sliding-window layers) are rejected by name rather than silently computed wrong.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>

namespace baton {

struct TextEncoderConfig {
  std::string model_type;    // of the language model: "mistral", "qwen3" or "llama"
  std::string architecture;  // architectures[0], e.g. "Mistral3ForConditionalGeneration", "Qwen3ForCausalLM"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // from the config when given (Mistral-Small-3.1: 128 ≠ 5120/32)
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool qk_norm = false;         // Qwen3: per-head RMSNorm q_norm/k_norm on q and k before RoPE
  bool attention_bias = false;  // q/k/v/o projections carry biases
  int64_t sliding_window = 0;   // Mistral: keys older than this many positions are masked; 0 = none

  // True when the language model sits inside Mistral3ForConditionalGeneration (text_config nesting,
  // `model.language_model.*` keys, vision tower alongside).
  bool is_mistral3() const { return architecture == "Mistral3ForConditionalGeneration"; }
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // Parameters of one decoder layer (projections, MLP, norms).
  int64_t LayerParams() const;

  absl::Status Validate() const;
};

// Parses config.json text; `source` names it in errors. For a config with `text_config` the language
// model fields come from there. Missing optional fields take transformers' defaults (head_dim =
// hidden/heads, num_key_value_heads = heads, rms_norm_eps 1e-6, rope_theta 10000, Mistral
// sliding_window 4096, null = none); `rope_theta` may also come from `rope_parameters` (transformers 5).
absl::StatusOr<TextEncoderConfig> ParseTextEncoderConfig(absl::string_view json_text, absl::string_view source);
absl::StatusOr<TextEncoderConfig> LoadTextEncoderConfig(const std::string& config_json_path);

// The HF config.json for `config`: a Mistral3ForConditionalGeneration config (text_config + a small
// pixtral vision_config) when is_mistral3(), else a flat one for `architecture` (default per model_type).
std::string TextEncoderConfigToJson(const TextEncoderConfig& config);

// Tiny stand-ins with the real layer counts (Mistral-Small-3.1: 40, Qwen3-4B/8B: 36) so FLUX.2's
// layer choices (10/20/30, 9/18/27) apply unchanged, but hidden 32 and head_dim 16 (≠ 32/4 heads, as
// Mistral-Small-3.1's 128 ≠ 5120/32). Vocabulary 1024 covers the tiny BPE tokenizer.
TextEncoderConfig TinyMistral3TextConfig();
TextEncoderConfig TinyQwen3TextConfig();

}  // namespace baton
