#include "core/sample/prompt_embeds.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/encode/flux2_encoder.h"
#include "core/encode/wan_encoder.h"
#include "core/tensor/safetensors.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/sha256.h"
#include "core/util/status.h"

namespace baton {
namespace {

// The pipeline's text encoder: umT5 for a Wan folder (WanPipeline's prompt embeddings), else FLUX.2's.
absl::StatusOr<std::unique_ptr<SampleEncoder>> OpenTextEncoder(const std::string& pipeline_dir,
                                                               int64_t max_sequence_length) {
  if (IsWanPipelineFolder(pipeline_dir)) {
    WanEncoderOptions options;
    options.max_sequence_length = max_sequence_length;
    ASSIGN_OR_RETURN(auto wan, WanSampleEncoder::Open(pipeline_dir, options));
    return std::unique_ptr<SampleEncoder>(std::move(wan));
  }
  Flux2EncoderOptions options;
  options.max_sequence_length = max_sequence_length;
  ASSIGN_OR_RETURN(auto flux2, Flux2SampleEncoder::Open(pipeline_dir, options));
  return std::unique_ptr<SampleEncoder>(std::move(flux2));
}

// What changes the text embeddings, computed without loading the text encoder (a resumed run must not pay for
// that): the text encoder's config, the tokenizer files, and each weight file's name, size and mtime (cheap stand-in
// for hashing gigabytes of weights: a replaced or retrained file gets a new mtime).
absl::StatusOr<std::string> TextEncoderIdentity(const std::string& pipeline_dir) {
  Sha256 h;
  for (const char* f : {"text_encoder/config.json", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"}) {
    auto text = ReadFile(JoinPath(pipeline_dir, f));
    h.Update(absl::StrCat(f, "\n", text.ok() ? *text : std::string("<absent>"), "\n"));
  }
  std::error_code ec;
  std::vector<std::string> weights;
  for (const auto& entry : std::filesystem::directory_iterator(JoinPath(pipeline_dir, "text_encoder"), ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::EndsWith(name, ".safetensors") || absl::EndsWith(name, ".json")) weights.push_back(name);
  }
  if (ec) {
    return absl::NotFoundError(absl::StrCat(pipeline_dir, " has no readable text_encoder/: ", ec.message()));
  }
  std::sort(weights.begin(), weights.end());
  for (const std::string& name : weights) {
    struct stat st {};
    if (stat(JoinPath(JoinPath(pipeline_dir, "text_encoder"), name).c_str(), &st) != 0) continue;
    h.Update(absl::StrCat(name, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "\n"));
  }
  return absl::StrCat(IsWanPipelineFolder(pipeline_dir) ? "wan-text:" : "flux2-text:", DigestToHex(h.Finish()));
}

std::string CacheKey(const std::string& identity, int64_t max_sequence_length, const std::string& prompt) {
  return Sha256Hex(absl::StrCat(identity, "\n", max_sequence_length, "\n", prompt));
}

// Entries of an existing cache file, or none when it is absent or unreadable (warned: a cache never fails a run).
std::map<std::string, at::Tensor> ReadCache(const std::string& cache_file) {
  std::map<std::string, at::Tensor> entries;
  if (cache_file.empty() || !PathExists(cache_file)) return entries;
  auto file = SafetensorsFile::Open(cache_file);
  if (!file.ok()) {
    LogWarning("sample prompt cache ", cache_file, " is unreadable, re-encoding: ", file.status().message());
    return entries;
  }
  for (const std::string& key : (*file)->Keys()) {
    auto tensor = (*file)->Load(key, at::kFloat);
    if (!tensor.ok() || tensor->dim() != 2) {
      LogWarning("sample prompt cache ", cache_file, " has a bad entry ", key, ", re-encoding it");
      continue;
    }
    entries[key] = *tensor;
  }
  return entries;
}

}  // namespace

absl::StatusOr<std::vector<at::Tensor>> EncodePromptsLocally(const std::string& pipeline_dir,
                                                             const std::vector<std::string>& prompts,
                                                             int64_t max_sequence_length,
                                                             const std::string& cache_file) {
  if (max_sequence_length <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_sequence_length must be positive, got ", max_sequence_length));
  }
  if (prompts.empty()) return std::vector<at::Tensor>{};
  ASSIGN_OR_RETURN(std::string identity, TextEncoderIdentity(pipeline_dir));
  std::map<std::string, at::Tensor> cache = ReadCache(cache_file);

  std::vector<at::Tensor> out(prompts.size());
  std::map<std::string, std::string> metadata;  // key → prompt text, for whoever opens the file
  std::unique_ptr<SampleEncoder> encoder;       // opened only when a prompt is missing from the cache
  bool wrote_new = false;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string key = CacheKey(identity, max_sequence_length, prompts[i]);
    metadata[key] = prompts[i];
    auto hit = cache.find(key);
    if (hit != cache.end() && hit->second.size(0) == max_sequence_length) {
      out[i] = hit->second;
      continue;
    }
    if (encoder == nullptr) {
      ASSIGN_OR_RETURN(encoder, OpenTextEncoder(pipeline_dir, max_sequence_length));
    }
    ASSIGN_OR_RETURN(at::Tensor embeds, encoder->EncodeText(prompts[i]));
    out[i] = embeds.to(at::kFloat).contiguous();
    cache[key] = out[i];
    wrote_new = true;
  }
  if (!cache_file.empty() && wrote_new) {
    // Keep earlier entries (other prompt lists, other lengths) too; prompt texts of entries not in this list are
    // carried over from the old metadata when it can be read.
    if (auto old = SafetensorsFile::Open(cache_file); old.ok()) {
      for (const auto& [k, v] : (*old)->metadata()) {
        if (cache.count(k) && !metadata.count(k)) metadata[k] = v;
      }
    }
    absl::Status written = WriteSafetensors(cache_file, cache, metadata);
    if (!written.ok()) LogWarning("could not write the sample prompt cache ", cache_file, ": ", written.message());
  }
  return out;
}

}  // namespace baton
