#include "core/model/wan_weights.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/keys/wan_keys.h"
#include "core/lora/lora_linear.h"
#include "core/model/wan_model.h"
#include "core/tensor/checked_load.h"
#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<std::string> WanExpertDir(const std::string& path, WanExpert expert) {
  if (!IsDirectory(path)) return path;
  const bool has_config = PathExists(JoinPath(path, "config.json"));
  for (const auto& [high, low] : std::vector<std::pair<std::string, std::string>>{
           {"transformer", "transformer_2"}, {"high_noise_model", "low_noise_model"}}) {
    if (has_config || !PathExists(JoinPath(path, JoinPath(high, "config.json")))) continue;
    if (expert != WanExpert::kLowNoise) return JoinPath(path, high);
    if (!PathExists(JoinPath(path, JoinPath(low, "config.json")))) {
      return absl::NotFoundError(absl::StrCat(path, " has no low-noise expert (", low, "/): not a Wan 2.2 A14B model"));
    }
    return JoinPath(path, low);
  }
  if (expert == WanExpert::kLowNoise) {
    return absl::NotFoundError(absl::StrCat(path, " holds one transformer: there is no low-noise expert to open"));
  }
  return path;
}

namespace {

// The safetensors files of an original Wan folder: an index, diffusion_pytorch_model.safetensors, or the one
// .safetensors file it holds.
absl::StatusOr<std::vector<std::string>> FolderFiles(const std::string& dir) {
  auto shards = SafetensorsShardPaths(dir, "diffusion_pytorch_model");
  if (shards.ok()) return shards;
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (absl::EndsWith(entry.path().string(), ".safetensors")) found.push_back(entry.path().string());
  }
  if (found.size() != 1) return shards.status();
  return found;
}

}  // namespace

absl::StatusOr<WanExperts> DescribeWanExperts(const std::string& path) {
  WanExperts e;
  if (!IsDirectory(path)) return e;
  e.two_experts = (PathExists(JoinPath(path, "transformer_2/config.json")) &&
                   PathExists(JoinPath(path, "transformer/config.json"))) ||
                  (PathExists(JoinPath(path, "low_noise_model/config.json")) &&
                   PathExists(JoinPath(path, "high_noise_model/config.json")));
  const std::string index = JoinPath(path, "model_index.json");
  if (PathExists(index)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileBounded(index, uint64_t{1} << 20));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(absl::StrCat(index, ": not JSON"));
    auto it = j.find("boundary_ratio");
    if (it != j.end() && it->is_number()) e.boundary_ratio = it->get<double>();
  }
  return e;
}

absl::Status WanCheckpoint::OpenFiles(const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(p));
    for (const auto& key : file->Keys()) key_to_file_[key] = file.get();
    files_.push_back(std::move(file));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WanCheckpoint>> WanCheckpoint::Open(const std::string& path,
                                                                   const std::string& config_path, WanExpert expert) {
  if (!PathExists(path)) return absl::NotFoundError(absl::StrCat("model path does not exist: ", path));
  std::unique_ptr<WanCheckpoint> ckpt(new WanCheckpoint());
  ASSIGN_OR_RETURN(ckpt->path_, WanExpertDir(path, expert));
  const std::string& dir = ckpt->path_;
  std::vector<std::string> files;
  std::string cfg = config_path;
  if (IsDirectory(dir)) {
    if (cfg.empty()) cfg = JoinPath(dir, "config.json");
    ASSIGN_OR_RETURN(files, FolderFiles(dir));
  } else {
    if (cfg.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, " is a single-file Wan checkpoint: pass its config.json (--config)"));
    }
    files.push_back(dir);
  }
  ASSIGN_OR_RETURN(ckpt->config_, LoadWanConfig(cfg));
  RETURN_IF_ERROR(ckpt->OpenFiles(files));
  // Original names: "blocks.0.self_attn.q.weight", possibly under a ComfyUI prefix; diffusers never has self_attn.
  for (const auto& [key, file] : ckpt->key_to_file_) {
    const std::string k = StripWanOriginalPrefix(key);
    if (k != key || absl::StrContains(k, ".self_attn.") || absl::StartsWith(k, "head.")) ckpt->is_original_ = true;
  }
  if (ckpt->is_original_) {
    for (const auto& [key, file] : ckpt->key_to_file_) {
      if (auto d = WanOriginalToDiffusers(key)) ckpt->diffusers_to_stored_[*d] = key;
    }
    // model_type i2v covers both Wan 2.1 I2V (CLIP branch) and Wan 2.2 I2V (none): the weights decide.
    if (ckpt->config_.has_image_branch() && !ckpt->diffusers_to_stored_.count("blocks.0.attn2.add_k_proj.weight")) {
      ckpt->config_.image_dim = ckpt->config_.added_kv_proj_dim = ckpt->config_.pos_embed_seq_len = 0;
    }
  }
  return ckpt;
}

std::string WanCheckpoint::StoredKey(const std::string& name) const {
  if (!is_original_) return name;
  auto it = diffusers_to_stored_.find(name);
  return it == diffusers_to_stored_.end() ? std::string() : it->second;
}

absl::StatusOr<std::vector<int64_t>> WanCheckpoint::Shape(const std::string& name) const {
  const std::string key = StoredKey(name);
  auto it = key_to_file_.find(key);
  if (key.empty() || it == key_to_file_.end()) return absl::NotFoundError(absl::StrCat("'", name, "' not in ", path_));
  ASSIGN_OR_RETURN(SafetensorsEntry e, it->second->Entry(key));
  return e.shape;
}

absl::StatusOr<at::Tensor> WanCheckpoint::Load(const std::string& name, at::ScalarType dtype) const {
  const std::string key = StoredKey(name);
  auto it = key_to_file_.find(key);
  if (key.empty() || it == key_to_file_.end()) return absl::NotFoundError(absl::StrCat("'", name, "' not in ", path_));
  return it->second->Load(key, dtype);
}

std::vector<std::string> WanCheckpoint::FilePaths() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::vector<std::string> WanCheckpoint::DiffusersKeys() const {
  std::vector<std::string> out;
  for (const auto& [key, file] : key_to_file_) {
    if (!is_original_) {
      out.push_back(key);
      continue;
    }
    auto d = WanOriginalToDiffusers(key);
    out.push_back(d ? *d : key);
  }
  return out;
}

absl::Status LoadWanWeights(torch::nn::Module& module, const WanCheckpoint& ckpt) {
  std::set<std::string> known;
  for (const auto& [name, shape] : WanParameterShapes(ckpt.config())) known.insert(name);
  std::vector<std::string> unexpected;
  for (const auto& key : ckpt.DiffusersKeys()) {
    // diffusers ignores norm_added_q on load (_keys_to_ignore_on_load_unexpected); so do we.
    if (!known.count(key) && !absl::StrContains(key, "norm_added_q")) unexpected.push_back(key);
  }
  return LoadParametersFrom(module, ckpt, IsLoraParameterName, unexpected,
                            absl::StrCat("weights in ", ckpt.path(), " do not match the Wan config"));
}

std::map<std::string, at::Tensor> RandomWanStateDict(const WanConfig& config, uint64_t seed, at::ScalarType dtype) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, shape] : WanParameterShapes(config)) {
    auto gen = at::detail::createCPUGenerator(MixSeed(seed, HashName(name)));
    at::Tensor t;
    if (absl::EndsWith(name, "scale_shift_table") || absl::EndsWith(name, "pos_embed")) {
      t = at::randn(shape, gen, at::kFloat) / std::sqrt(static_cast<double>(shape.back()));
    } else if (shape.size() == 1 && absl::EndsWith(name, ".bias")) {
      t = 0.1 * at::randn(shape, gen, at::kFloat);
    } else if (shape.size() == 1) {
      t = 1.0 + 0.1 * at::randn(shape, gen, at::kFloat);  // norm scales near 1
    } else {
      int64_t fan_in = 1;
      for (size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
      // 1/sqrt(fan_in) keeps activations O(1) through a few random blocks.
      t = at::randn(shape, gen, at::kFloat) / std::sqrt(static_cast<double>(fan_in));
    }
    out[name] = t.to(dtype);
  }
  return out;
}

absl::Status WriteRandomWanWeights(const WanConfig& config, const std::string& out_dir, uint64_t seed,
                                   at::ScalarType dtype, int64_t max_shard_bytes) {
  RETURN_IF_ERROR(MakeDirs(out_dir));
  auto tensors = RandomWanStateDict(config, seed, dtype);
  RETURN_IF_ERROR(WriteShardedSafetensors(out_dir, "diffusion_pytorch_model", {tensors.begin(), tensors.end()},
                                          {{"format", "pt"}}, max_shard_bytes));
  return WriteFileAtomic(JoinPath(out_dir, "config.json"), WanConfigToJson(config));
}

}  // namespace baton
