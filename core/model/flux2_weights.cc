#include "core/model/flux2_weights.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <cmath>

#include "core/keys/flux2_keys.h"
#include "core/lora/lora_linear.h"
#include "core/model/flux2_model.h"
#include "core/quant/stored_quant.h"
#include "core/tensor/checked_load.h"
#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<std::unique_ptr<Flux2Checkpoint>> Flux2Checkpoint::Open(const std::string& path,
                                                                       const std::string& config_path) {
  std::unique_ptr<Flux2Checkpoint> ckpt(new Flux2Checkpoint());
  ckpt->path_ = path;
  std::string dir = path;
  if (IsDirectory(path) && !PathExists(JoinPath(path, "config.json")) &&
      PathExists(JoinPath(path, "transformer/config.json"))) {
    dir = JoinPath(path, "transformer");  // a diffusers pipeline folder
  }
  std::vector<std::string> shard_paths;
  if (IsDirectory(dir)) {
    std::string cfg = config_path.empty() ? JoinPath(dir, "config.json") : config_path;
    ASSIGN_OR_RETURN(ckpt->config_, LoadFlux2Config(cfg));
    ASSIGN_OR_RETURN(shard_paths, SafetensorsShardPaths(dir, "diffusion_pytorch_model"));
  } else {
    if (!PathExists(path)) return absl::NotFoundError(absl::StrCat("model path does not exist: ", path));
    if (config_path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is a single-file (BFL) checkpoint: pass the diffusers-style config.json for it (--config)"));
    }
    ASSIGN_OR_RETURN(ckpt->config_, LoadFlux2Config(config_path));
    shard_paths.push_back(path);
  }
  for (const auto& p : shard_paths) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(p));
    for (const auto& key : file->Keys()) ckpt->key_to_file_[key] = file.get();
    ckpt->files_.push_back(std::move(file));
  }
  // BFL files name the first double block "double_blocks.0...."; diffusers files never do.
  for (const auto& [key, file] : ckpt->key_to_file_) {
    if (absl::StartsWith(key, "double_blocks.") || absl::StartsWith(key, "single_blocks.") ||
        absl::StartsWith(key, "img_in.")) {
      ckpt->is_bfl_ = true;
      break;
    }
  }
  RETURN_IF_ERROR(ckpt->DetectStoredQuant());
  return ckpt;
}

absl::Status Flux2Checkpoint::DetectStoredQuant() {
  std::set<WeightQuant> kinds;
  for (const auto& [key, file] : key_to_file_) {
    if (IsQuantSideKey(key)) continue;
    ASSIGN_OR_RETURN(SafetensorsEntry e, file->Entry(key));
    if (IsEightBitDtype(e.dtype)) kinds.insert(e.dtype == "I8" ? WeightQuant::kInt8 : WeightQuant::kFp8);
  }
  if (kinds.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(path_, " mixes int8 and fp8 weights; one kind per checkpoint"));
  }
  if (!kinds.empty()) stored_quant_ = *kinds.begin();
  return absl::OkStatus();
}

absl::StatusOr<const SafetensorsFile*> Flux2Checkpoint::FileFor(const std::string& stored_key) const {
  auto it = key_to_file_.find(stored_key);
  if (it == key_to_file_.end()) return absl::NotFoundError(absl::StrCat("tensor '", stored_key, "' not in ", path_));
  return it->second;
}

absl::StatusOr<std::vector<int64_t>> Flux2Checkpoint::Shape(const std::string& name) const {
  if (!is_bfl_) {
    ASSIGN_OR_RETURN(const SafetensorsFile* f, FileFor(name));
    ASSIGN_OR_RETURN(SafetensorsEntry e, f->Entry(name));
    return e.shape;
  }
  auto loc = DiffusersToBfl(name);
  if (!loc) return absl::NotFoundError(absl::StrCat("no BFL name for '", name, "'"));
  ASSIGN_OR_RETURN(const SafetensorsFile* f, FileFor(loc->key));
  ASSIGN_OR_RETURN(SafetensorsEntry e, f->Entry(loc->key));
  std::vector<int64_t> shape = e.shape;
  if (!shape.empty()) shape[0] /= loc->num_chunks;
  return shape;
}

absl::StatusOr<std::optional<QuantizedWeight>> Flux2Checkpoint::LoadQuantized(const std::string& name) const {
  std::optional<BflLocation> loc;
  if (is_bfl_) {
    loc = DiffusersToBfl(name);
    if (!loc) return absl::NotFoundError(absl::StrCat("no BFL name for '", name, "'"));
  }
  const std::string stored_key = loc ? loc->key : name;
  ASSIGN_OR_RETURN(const SafetensorsFile* f, FileFor(stored_key));
  ASSIGN_OR_RETURN(SafetensorsEntry e, f->Entry(stored_key));
  if (!IsEightBitDtype(e.dtype)) return std::optional<QuantizedWeight>();
  const SafetensorsFile* scale_file = nullptr;
  std::string scale_key;
  for (const std::string& candidate : ScaleKeyCandidates(stored_key)) {
    auto it = key_to_file_.find(candidate);  // any shard: a weight and its scale may sit in different files
    if (it == key_to_file_.end()) continue;
    scale_file = it->second;
    scale_key = candidate;
    break;
  }
  if (scale_file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": 8-bit tensor '", stored_key, "' has no scale (",
                                                   absl::StrJoin(ScaleKeyCandidates(stored_key), " or "),
                                                   " expected)"));
  }
  ASSIGN_OR_RETURN(auto pair, LoadEightBitWeight(*f, stored_key, *scale_file, scale_key));
  QuantizedWeight q{std::move(pair.first), std::move(pair.second)};
  if (loc && loc->num_chunks > 1) {  // fused BFL qkv: rows split, each row keeps its scale
    q.data = q.data.chunk(loc->num_chunks, 0)[loc->chunk].contiguous();
    q.scale = q.scale.chunk(loc->num_chunks, 0)[loc->chunk].contiguous();
  }
  if (loc && loc->swap_halves) {
    q.data = SwapHalves(q.data);
    q.scale = SwapHalves(q.scale);
  }
  return std::optional<QuantizedWeight>(std::move(q));
}

absl::StatusOr<at::Tensor> Flux2Checkpoint::Load(const std::string& name, at::ScalarType dtype) const {
  ASSIGN_OR_RETURN(std::optional<QuantizedWeight> q, LoadQuantized(name));
  if (q) return DequantizeWeight(q->data, q->scale, dtype == at::ScalarType::Undefined ? at::kFloat : dtype);
  if (!is_bfl_) {
    ASSIGN_OR_RETURN(const SafetensorsFile* f, FileFor(name));
    return f->Load(name, dtype);
  }
  auto loc = DiffusersToBfl(name);
  if (!loc) return absl::NotFoundError(absl::StrCat("no BFL name for '", name, "'"));
  ASSIGN_OR_RETURN(const SafetensorsFile* f, FileFor(loc->key));
  ASSIGN_OR_RETURN(at::Tensor t, f->Load(loc->key, dtype));
  if (loc->num_chunks > 1) t = t.chunk(loc->num_chunks, 0)[loc->chunk].contiguous();
  if (loc->swap_halves) t = SwapHalves(t);
  return t;
}

absl::StatusOr<std::string> Flux2Checkpoint::StoredDtype(const std::string& name) const {
  std::string stored_key = name;
  if (is_bfl_) {
    auto loc = DiffusersToBfl(name);
    if (!loc) return absl::NotFoundError(absl::StrCat("no BFL name for '", name, "'"));
    stored_key = loc->key;
  }
  ASSIGN_OR_RETURN(const SafetensorsFile* f, FileFor(stored_key));
  ASSIGN_OR_RETURN(SafetensorsEntry e, f->Entry(stored_key));
  return e.dtype;
}

std::vector<std::string> Flux2Checkpoint::FilePaths() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::vector<std::string> Flux2Checkpoint::DiffusersKeys() const {
  std::vector<std::string> out;
  for (const auto& [key, file] : key_to_file_) {
    if (IsQuantSideKey(key)) continue;
    if (!is_bfl_) {
      out.push_back(key);
      continue;
    }
    auto names = BflToDiffusers(key);
    if (names.empty()) out.push_back(key);
    out.insert(out.end(), names.begin(), names.end());
  }
  return out;
}

absl::Status LoadFlux2Weights(torch::nn::Module& module, const Flux2Checkpoint& ckpt) {
  std::set<std::string> known;
  for (const auto& [name, shape] : Flux2ParameterShapes(ckpt.config())) known.insert(name);
  std::vector<std::string> unexpected;
  for (const auto& key : ckpt.DiffusersKeys()) {
    if (!known.count(key)) unexpected.push_back(key);
  }
  return LoadParametersFrom(module, ckpt, IsLoraParameterName, unexpected,
                            absl::StrCat("weights in ", ckpt.path(), " do not match the FLUX.2 config"));
}

std::map<std::string, at::Tensor> RandomFlux2StateDict(const Flux2Config& config, uint64_t seed, at::ScalarType dtype) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, shape] : Flux2ParameterShapes(config)) {
    auto gen = at::detail::createCPUGenerator(MixSeed(seed, HashName(name)));
    at::Tensor t;
    if (shape.size() == 1) {
      t = 1.0 + 0.1 * at::randn(shape, gen, at::kFloat);  // RMSNorm scales near 1
    } else {
      // 1/√fan_in keeps activations O(1) through a few random blocks.
      t = at::randn(shape, gen, at::kFloat) / std::sqrt(static_cast<double>(shape[1]));
    }
    out[name] = t.to(dtype);
  }
  return out;
}

absl::Status WriteRandomFlux2Weights(const Flux2Config& config, const std::string& out_dir, uint64_t seed,
                                     at::ScalarType dtype, int64_t max_shard_bytes) {
  RETURN_IF_ERROR(MakeDirs(out_dir));
  auto tensors = RandomFlux2StateDict(config, seed, dtype);
  RETURN_IF_ERROR(WriteShardedSafetensors(out_dir, "diffusion_pytorch_model", {tensors.begin(), tensors.end()},
                                          {{"format", "pt"}}, max_shard_bytes));
  return WriteFileAtomic(JoinPath(out_dir, "config.json"), Flux2ConfigToJson(config));
}

}  // namespace baton
