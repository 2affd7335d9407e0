// FLUX.2's text encoder: the Llama-style decoder of Mistral-Small-3.1 (transformers' MistralModel inside
// Mistral3ForConditionalGeneration) or of Qwen3 (Qwen3Model, klein), run as a feature extractor that
// returns intermediate hidden states. RMSNorm (fp32, then cast), GQA, rotate-half RoPE with rope_theta,
// SwiGLU, no biases unless attention_bias; Qwen3 adds per-head q_norm/k_norm before RoPE.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/quant/weight_quant.h"
#include "core/text/text_encoder_checkpoint.h"
#include "core/text/text_encoder_config.h"
#include "core/text/text_weights.h"

namespace baton {

// Memory: weights stay in the memory-mapped safetensors; one decoder layer at a time is copied out, run
// for the whole batch and dropped, and only layers up to the deepest one requested are ever read (the
// final norm only when hidden_states[num_hidden_layers] is asked for), so a 24 B encoder runs in ordinary
// RAM. With `quantize` int8 | fp8 the Linear weights of each layer are instead quantized once, the first time the
// layer runs, and stay resident in 8 bits (text_weights.h): FLUX.2-dev's Mistral-3 (24 B) then holds ~17 GB for
// layers 1-30 rather than streaming 48 GB of bf16 per call. Not thread-safe: one Encode at a time per TextEncoder.
class TextEncoder {
 public:
  // Reads `text_encoder_dir`/config.json and the checkpoint's index/header, and checks the embedding's
  // and layer 0's shapes against the config (so a wrong head_dim fails here, naming the key). `dtype` is
  // the compute dtype (kFloat, kBFloat16, kHalf or kDouble); weights are converted to it as they load.
  // `quantize`: the Linear weights' storage (core/quant/weight_quant.h), kNone = the compute dtype.
  static absl::StatusOr<std::unique_ptr<TextEncoder>> Open(const std::string& text_encoder_dir, at::ScalarType dtype,
                                                           at::Device device,
                                                           WeightQuant quantize = WeightQuant::kNone);

  const TextEncoderConfig& config() const { return config_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  WeightQuant quantize() const { return weights_->quant(); }

  // input_ids [B, L] int64 (int32 accepted); attention_mask [B, L], 1 = token, 0 = padding, or undefined
  // for all ones. Positions are 0..L-1 whatever the padding (transformers' default position_ids), and
  // attention is causal and masked at padded keys, as transformers' sdpa path does; a query that may
  // attend to nothing (a left-padding position) gets a zero attention output, as torch ≥ 2.5 SDPA gives.
  // Returns hidden states in transformers' convention (hidden_states[0] = embeddings, [k] = output of
  // decoder layer k (1-based), [num_hidden_layers] = after the final norm) for `layers`, concatenated per
  // token in the given order: [B, L, layers.size()*hidden_size] fp32 on `device`.
  // Each call reads the weights of the layers it runs once, whatever B: batch captions to amortize that.
  // Leading padding shared by all rows costs one row per distinct pad token, not one per position.
  // Errors: no layers, a layer outside [0, num_hidden_layers], ids outside [0, vocab_size), bad shapes.
  absl::StatusOr<at::Tensor> Encode(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                    const std::vector<int64_t>& layers);

  // Most bytes of weights (in the compute dtype) held at once during the last Encode: one decoder
  // layer, or the gathered embedding rows if larger (8-bit Linear weights excluded: they are resident).
  int64_t last_peak_weight_bytes() const { return last_peak_weight_bytes_; }
  // Bytes of the resident 8-bit Linear weights (0 without `quantize`).
  int64_t resident_weight_bytes() const { return weights_->resident_bytes(); }

 private:
  TextEncoder() = default;

  TextEncoderConfig config_;
  std::unique_ptr<TextEncoderCheckpoint> checkpoint_;
  std::unique_ptr<TextWeights> weights_;  // reads checkpoint_
  at::ScalarType dtype_ = at::kFloat;
  at::Device device_ = at::kCPU;
  int64_t last_peak_weight_bytes_ = 0;
};

}  // namespace baton
