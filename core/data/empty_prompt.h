// The empty caption's embedding, cached once per cache folder (core/data/cache.h: EmptyPromptInfo): written by the
// encoder worker beside the records, read by CacheReader::EmptyPrompt for caption dropout.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <string>

#include "core/data/cache.h"

namespace baton {

// Writes DIR/empty_prompt.safetensors (the embedding of "", [text_len, text_dim]) atomically; returns the entry the
// index lists for it.
absl::StatusOr<EmptyPromptInfo> WriteEmptyPrompt(const std::string& dir, const std::string& encoder,
                                                 const at::Tensor& prompt_embeds);
// Reads DIR/empty_prompt.safetensors back, checked against `layout` (text_dim), `info` (text_len and, when given, the
// checksum), sane values and, when `encoder` is not empty, the encoder that wrote it. DataLoss naming the file.
absl::StatusOr<at::Tensor> ReadEmptyPrompt(const std::string& dir, const CacheLayout& layout,
                                           const EmptyPromptInfo& info, const std::string& encoder = "");

}  // namespace baton
