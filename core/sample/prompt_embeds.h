// Sample prompts → the transformer's text embeddings, encoded once and kept on disk: a rerun or a resumed run
// reads them back instead of loading the text encoder again.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

// Encodes `prompts` with the text encoder and tokenizer of the FLUX.2 or Wan pipeline folder `pipeline_dir` in this
// process (as the encoder worker encodes captions), padded to `max_sequence_length` tokens: one [L, text_dim] fp32
// tensor per prompt. `cache_file` (optional, a safetensors file): entries already there for the same encoder and
// prompt are read instead of encoded, new ones added.
absl::StatusOr<std::vector<at::Tensor>> EncodePromptsLocally(const std::string& pipeline_dir,
                                                             const std::vector<std::string>& prompts,
                                                             int64_t max_sequence_length,
                                                             const std::string& cache_file = "");

}  // namespace baton
