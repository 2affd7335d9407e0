// umT5 encoder tensors in transformers' naming (`shared.weight`, `encoder.block.N.layer.0.SelfAttention.q.weight`,
// ...), as a diffusers Wan pipeline's text_encoder/ holds them (model.safetensors or shards + index), read
// through TextEncoderCheckpoint (memory-mapped per call, embedding rows by pread). Also writes random tiny
// checkpoints in that layout for tests.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/text/text_encoder_checkpoint.h"
#include "core/text/umt5_config.h"

namespace baton {

// Block `layer`'s tensors in the order Umt5Encoder uses them: layer.0 layer_norm, q, k, v, o,
// relative_attention_bias [buckets, heads], layer.1 layer_norm, wi_0 + wi_1 (gated) or wi, wo.
std::vector<TextEncoderTensorSpec> Umt5BlockSpecs(const Umt5Config& config, int64_t layer);
TextEncoderTensorSpec Umt5FinalNormSpec(const Umt5Config& config);
// `name` ("shared.weight" or "encoder.embed_tokens.weight") as [vocab_size, d_model].
TextEncoderTensorSpec Umt5EmbeddingSpec(const Umt5Config& config, const std::string& name);

// Opens `dir` keyed on shared.weight (or encoder.embed_tokens.weight when only that is stored); sets
// *embedding_name to the one found.
absl::StatusOr<std::unique_ptr<TextEncoderCheckpoint>> OpenUmt5Checkpoint(const std::string& dir,
                                                                          std::string* embedding_name);

// Writes `dir`/config.json and random fp32 (or bf16) weights under transformers' UMT5EncoderModel names
// (shared.weight and encoder.embed_tokens.weight both, as save_pretrained may), optionally sharded.
absl::Status WriteRandomUmt5Encoder(const Umt5Config& config, const std::string& dir, uint64_t seed, bool bf16 = false,
                                    int64_t max_shard_bytes = 0);

}  // namespace baton
