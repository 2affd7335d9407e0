// The language-model tensors of a text encoder checkpoint in Hugging Face safetensors form: one
// `model.safetensors` or shards listed in `model.safetensors.index.json`, under any of the key layouts
// transformers writes (TextEncoderCheckpoint). Also writes random checkpoints in the same layouts for tests
// and the tiny pipeline.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/text/text_encoder_config.h"

namespace baton {

class SafetensorsFile;

// A tensor named relative to the decoder ("layers.3.mlp.up_proj.weight") and its expected shape.
struct TextEncoderTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Layer `layer`'s tensors in the order TextEncoder uses them: input_layernorm, q/k/v/o_proj,
// [q/k/v/o biases], [q_norm, k_norm], post_attention_layernorm, gate/up/down_proj. Shapes honour head_dim:
// q_proj is [num_attention_heads*head_dim, hidden_size].
std::vector<TextEncoderTensorSpec> TextEncoderLayerSpecs(const TextEncoderConfig& config, int64_t layer);
// embed_tokens.weight, every layer's tensors in order, norm.weight.
std::vector<TextEncoderTensorSpec> TextEncoderTensorSpecs(const TextEncoderConfig& config);

// Key layouts: `model.language_model.*` for Mistral3ForConditionalGeneration in newer transformers,
// `language_model.model.*` in older ones, `model.*` for *ForCausalLM, bare for a saved MistralModel.
// Vision tower, projector and lm_head tensors are never touched. Files are memory-mapped only while a
// group of tensors is copied out, so pages of layers already used leave the process's resident set.
class TextEncoderCheckpoint {
 public:
  // `dir` holds model.safetensors.index.json (preferred) or model.safetensors. Reads the index (or the
  // single file's header) and detects the layout from where `embed_tokens.weight` lives. Shards are not
  // opened here: a shard holding only layers that are never run may be absent.
  static absl::StatusOr<std::unique_ptr<TextEncoderCheckpoint>> Open(const std::string& dir);
  // The same for another model's layout: the prefix is the first of `prefixes` under which `anchor` (a
  // tensor every checkpoint of that model holds, e.g. umT5's "shared.weight") exists.
  static absl::StatusOr<std::unique_ptr<TextEncoderCheckpoint>> Open(const std::string& dir, const std::string& anchor,
                                                                     const std::vector<std::string>& prefixes);

  const std::string& dir() const { return dir_; }
  const std::string& prefix() const { return prefix_; }  // e.g. "model.language_model."
  std::string Key(const std::string& name) const { return prefix_ + name; }
  bool Contains(const std::string& name) const { return file_of_.count(Key(name)) > 0; }

  // Checks that the tensors exist with the expected shapes, reading only file headers.
  absl::Status CheckShapes(const std::vector<TextEncoderTensorSpec>& specs) const;

  // Copies the tensors `specs` out of their files, converted to `dtype`; each file is mapped only for
  // the duration of the call. Errors name the key, the file, and expected vs actual shape.
  absl::StatusOr<std::vector<at::Tensor>> Load(const std::vector<TextEncoderTensorSpec>& specs,
                                               at::ScalarType dtype) const;

  // The same tensors as Load, but each one stored as `dtype` is a read-only view of its file's mapping (no copy;
  // SafetensorsFile::View), which stays mapped while a view lives. Others are copied and converted as by Load.
  absl::StatusOr<std::vector<at::Tensor>> View(const std::vector<TextEncoderTensorSpec>& specs,
                                               at::ScalarType dtype) const;

  // Rows `rows` of the 2-D tensor `spec` (e.g. embed_tokens [vocab, hidden]) read with pread, so the
  // table is never loaded whole: [rows.size(), spec.shape[1]] in `dtype`.
  absl::StatusOr<at::Tensor> GatherRows(const TextEncoderTensorSpec& spec, const std::vector<int64_t>& rows,
                                        at::ScalarType dtype) const;

 private:
  TextEncoderCheckpoint() = default;
  absl::StatusOr<std::string> FileOf(const std::string& key) const;
  // Maps each file holding some of `specs` once, checks every shape, then calls fn(file, key, index).
  absl::Status VisitByFile(const std::vector<TextEncoderTensorSpec>& specs,
                           const std::function<absl::Status(const std::shared_ptr<const SafetensorsFile>&,
                                                            const std::string&, size_t)>& fn) const;

  std::string dir_;
  std::string prefix_;
  std::map<std::string, std::string> file_of_;  // full key → shard path
};

// Writes `dir`/config.json and random bf16 weights (model.safetensors, or shards + index when
// max_shard_bytes > 0; tensors in model order, so later shards hold later layers). Each language-model
// tensor is drawn from a generator seeded by MixSeed(seed, HashName(its decoder-relative name)), so both
// Mistral3 layouts hold identical values. Mistral3 configs get `model.language_model.*` (or
// `language_model.model.*` with legacy_layout) plus a few vision-tower/projector tensors and lm_head;
// other architectures get `model.*` + `lm_head.weight` (legacy_layout is ignored).
absl::Status WriteRandomTextEncoder(const TextEncoderConfig& config, const std::string& dir, uint64_t seed,
                                    bool legacy_layout = false, int64_t max_shard_bytes = 0);

}  // namespace baton
