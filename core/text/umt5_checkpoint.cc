#include "core/text/umt5_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <utility>

#include "core/tensor/safetensors.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {

std::vector<TextEncoderTensorSpec> Umt5BlockSpecs(const Umt5Config& c, int64_t layer) {
  const std::string p = absl::StrCat("encoder.block.", layer, ".layer.");
  const int64_t d = c.d_model, inner = c.inner_dim(), ff = c.d_ff;
  std::vector<TextEncoderTensorSpec> specs = {
      {p + "0.layer_norm.weight", {d}},
      {p + "0.SelfAttention.q.weight", {inner, d}},
      {p + "0.SelfAttention.k.weight", {inner, d}},
      {p + "0.SelfAttention.v.weight", {inner, d}},
      {p + "0.SelfAttention.o.weight", {d, inner}},
      {p + "0.SelfAttention.relative_attention_bias.weight", {c.relative_attention_num_buckets, c.num_heads}},
      {p + "1.layer_norm.weight", {d}},
  };
  if (c.gated()) {
    specs.push_back({p + "1.DenseReluDense.wi_0.weight", {ff, d}});
    specs.push_back({p + "1.DenseReluDense.wi_1.weight", {ff, d}});
  } else {
    specs.push_back({p + "1.DenseReluDense.wi.weight", {ff, d}});
  }
  specs.push_back({p + "1.DenseReluDense.wo.weight", {d, ff}});
  return specs;
}

TextEncoderTensorSpec Umt5FinalNormSpec(const Umt5Config& c) {
  return {"encoder.final_layer_norm.weight", {c.d_model}};
}

TextEncoderTensorSpec Umt5EmbeddingSpec(const Umt5Config& c, const std::string& name) {
  return {name, {c.vocab_size, c.d_model}};
}

absl::StatusOr<std::unique_ptr<TextEncoderCheckpoint>> OpenUmt5Checkpoint(const std::string& dir,
                                                                          std::string* embedding_name) {
  for (const char* name : {"shared.weight", "encoder.embed_tokens.weight"}) {
    auto ckpt = TextEncoderCheckpoint::Open(dir, name, {""});
    if (ckpt.ok()) {
      *embedding_name = name;
      return ckpt;
    }
    if (!absl::IsNotFound(ckpt.status())) return ckpt.status();
  }
  return absl::NotFoundError(
      absl::StrCat(dir,
                   ": no umT5 embedding ('shared.weight' or 'encoder.embed_tokens.weight'); is this a transformers "
                   "UMT5EncoderModel folder?"));
}

absl::Status WriteRandomUmt5Encoder(const Umt5Config& c, const std::string& dir, uint64_t seed, bool bf16,
                                    int64_t max_shard_bytes) {
  RETURN_IF_ERROR(c.Validate());
  RETURN_IF_ERROR(MakeDirs(dir));
  std::vector<TextEncoderTensorSpec> specs = {Umt5EmbeddingSpec(c, "shared.weight")};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    for (auto& s : Umt5BlockSpecs(c, i)) specs.push_back(std::move(s));
  }
  specs.push_back(Umt5FinalNormSpec(c));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& spec : specs) {
    auto gen = at::detail::createCPUGenerator(MixSeed(seed, HashName(spec.name)));
    at::Tensor t = at::randn(spec.shape, gen, at::kFloat);
    // Norm scales near 1; matrices scaled by 1/sqrt(fan_in) so activations stay O(1); biases ~N(0, 1).
    if (spec.shape.size() == 1) {
      t = 1.0 + 0.1 * t;
    } else if (spec.name.find("Attention.") != std::string::npos && spec.name.find("relative") == std::string::npos) {
      t = t / std::sqrt(static_cast<double>(spec.shape[1]));
    } else if (spec.name.find("DenseReluDense") != std::string::npos) {
      t = t / std::sqrt(static_cast<double>(spec.shape[1]));
    }
    tensors.emplace_back(spec.name, bf16 ? t.to(at::kBFloat16) : t);
  }
  tensors.insert(tensors.begin() + 1, {"encoder.embed_tokens.weight", tensors.front().second.clone()});
  RETURN_IF_ERROR(WriteShardedSafetensors(dir, "model", tensors, {{"format", "pt"}}, max_shard_bytes));
  return WriteFileAtomic(JoinPath(dir, "config.json"), Umt5ConfigToJson(c));
}

}  // namespace baton
