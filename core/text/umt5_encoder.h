// Wan's text encoder: transformers' UMT5EncoderModel, last_hidden_state only (Umt5Encoder says how each block
// computes).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/quant/weight_quant.h"
#include "core/text/text_encoder_checkpoint.h"
#include "core/text/text_weights.h"
#include "core/text/umt5_config.h"

namespace baton {

// Per block: T5 RMS layer norm (variance in fp32, no mean, no bias), self-attention without the 1/sqrt(d) scaling
// whose scores get the block's OWN relative position bias (umT5, unlike T5, gives every block one),
// bidirectional bucketed relative positions, padded keys masked by adding the dtype's lowest value (transformers'
// eager path), a gated-GELU (gelu_new, tanh) feed-forward; a final layer norm. As transformers keeps `wo` in fp32
// (_keep_in_fp32_modules), a bf16/fp16 compute dtype runs wo in fp32 and the residual stream is fp32 from then on.
// Memory: weights stay in the memory-mapped safetensors; one block at a time is copied out, run for the whole
// batch and dropped; only the embedding rows of the ids in the batch are read. With `quantize` int8 | fp8 the
// Linear weights are quantized once and stay resident in 8 bits instead (text_weights.h). Not thread-safe.
class Umt5Encoder {
 public:
  // Reads `text_encoder_dir`/config.json and the checkpoint's index/header, and checks the embedding's and
  // block 0's shapes against the config. `dtype`: kFloat, kBFloat16, kHalf or kDouble. `quantize`: the Linear
  // weights' storage (kNone = the compute dtype).
  static absl::StatusOr<std::unique_ptr<Umt5Encoder>> Open(const std::string& text_encoder_dir, at::ScalarType dtype,
                                                           at::Device device,
                                                           WeightQuant quantize = WeightQuant::kNone);

  const Umt5Config& config() const { return config_; }
  WeightQuant quantize() const { return weights_->quant(); }
  int64_t resident_weight_bytes() const { return weights_->resident_bytes(); }

  // input_ids [B, L] int64 (int32 accepted); attention_mask [B, L] of 0/1 or undefined (all ones).
  // Returns last_hidden_state [B, L, d_model] fp32 on the device. A row whose mask is all zeros attends
  // uniformly to every position, as transformers' eager path does.
  absl::StatusOr<at::Tensor> Encode(const at::Tensor& input_ids, const at::Tensor& attention_mask);

 private:
  Umt5Encoder() = default;

  Umt5Config config_;
  Umt5Activation activation_ = Umt5Activation::kGeluTanh;
  std::string embedding_name_;
  std::unique_ptr<TextEncoderCheckpoint> checkpoint_;
  std::unique_ptr<TextWeights> weights_;  // reads checkpoint_
  at::ScalarType dtype_ = at::kFloat;
  at::Device device_ = at::kCPU;
};

// transformers' UMT5Attention._relative_position_bucket for an encoder (bidirectional): the bucket of
// key position - query position, [L, L] int64, computed with the same fp32 log arithmetic.
at::Tensor Umt5RelativePositionBuckets(int64_t length, int64_t num_buckets, int64_t max_distance, at::Device device);

}  // namespace baton
