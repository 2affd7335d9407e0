// Reading and writing Wan 2.x transformer weights: diffusers and original checkpoints (WanCheckpoint), Wan 2.2
// A14B's two experts. Files are memory-mapped and only the tensors a module asks for are read, so a stage
// touches only its blocks.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model/wan_config.h"
#include "core/tensor/safetensors.h"

namespace baton {

// Which expert of a Wan 2.2 A14B pipeline to open. kDefault: the only transformer, or the high-noise expert.
enum class WanExpert { kDefault, kHighNoise, kLowNoise };

// The experts a folder holds, from its layout and model_index.json.
struct WanExperts {
  bool two_experts = false;     // transformer/ + transformer_2/ (or high_noise_model/ + low_noise_model/)
  double boundary_ratio = 0.0;  // model_index.json `boundary_ratio` (0 when absent): timesteps >= ratio·1000
                                // go to the high-noise expert, as diffusers' WanPipeline switches
};
absl::StatusOr<WanExperts> DescribeWanExperts(const std::string& path);
// The folder holding one expert's transformer: a diffusers pipeline's transformer/ (high, and the default) or
// transformer_2/ (low); an original A14B folder's high_noise_model/ or low_noise_model/; else `path` itself.
// NotFound for the low-noise expert of a folder that has one transformer.
absl::StatusOr<std::string> WanExpertDir(const std::string& path, WanExpert expert);

// Accepted sources:
//   - a diffusers transformer folder (config.json + diffusion_pytorch_model.safetensors, or shards + index);
//   - a diffusers pipeline folder: transformer/ (and, for Wan 2.2 A14B, transformer_2/ = the low-noise expert,
//     with `boundary_ratio` in model_index.json);
//   - original Wan checkpoints (Wan-AI / DiffSynth / ComfyUI names, with or without a "model.diffusion_model." or
//     "diffusion_model." prefix): a folder (config.json + one file or shards + index; Wan 2.2 A14B ships
//     high_noise_model/ and low_noise_model/) or a single file with its config given separately.
class WanCheckpoint {
 public:
  // `config_path` is required for an original single file and optional otherwise (overrides config.json).
  static absl::StatusOr<std::unique_ptr<WanCheckpoint>> Open(const std::string& path,
                                                             const std::string& config_path = "",
                                                             WanExpert expert = WanExpert::kDefault);

  const WanConfig& config() const { return config_; }
  bool is_original() const { return is_original_; }
  const std::string& path() const { return path_; }

  // Shape / tensor of a parameter by its diffusers name (original checkpoints are mapped), or NotFound.
  absl::StatusOr<std::vector<int64_t>> Shape(const std::string& diffusers_name) const;
  absl::StatusOr<at::Tensor> Load(const std::string& diffusers_name, at::ScalarType dtype) const;
  std::vector<std::string> FilePaths() const;
  // Every parameter in diffusers names (unknown original keys kept verbatim).
  std::vector<std::string> DiffusersKeys() const;

 private:
  WanCheckpoint() = default;
  absl::Status OpenFiles(const std::vector<std::string>& paths);
  std::string StoredKey(const std::string& diffusers_name) const;

  std::string path_;
  WanConfig config_;
  bool is_original_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> key_to_file_;  // stored key -> file
  std::map<std::string, std::string> diffusers_to_stored_;     // original checkpoints only
};

// Loads every frozen (non-LoRA) parameter and buffer-free weight of `module` (diffusers names) from the
// checkpoint, converting to each parameter's dtype. Problems are gathered into one InvalidArgument error: missing
// keys, mis-shaped keys, and checkpoint keys a Wan model of this config does not have.
absl::Status LoadWanWeights(torch::nn::Module& module, const WanCheckpoint& checkpoint);

// Deterministic random weights, each tensor from a generator seeded by (seed, name), diffusers names.
std::map<std::string, at::Tensor> RandomWanStateDict(const WanConfig& config, uint64_t seed,
                                                     at::ScalarType dtype = at::kFloat);
// Written in the diffusers layout (config.json + diffusion_pytorch_model.safetensors, or shards + index).
absl::Status WriteRandomWanWeights(const WanConfig& config, const std::string& out_dir, uint64_t seed,
                                   at::ScalarType dtype = at::kFloat, int64_t max_shard_bytes = 0);

}  // namespace baton
