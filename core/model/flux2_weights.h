// Reading and writing FLUX.2 transformer weights: diffusers folders, pipeline folders and the original BFL single
// file (Flux2Checkpoint), memory-mapped so a pipeline stage touches just its block range of a 64 GB checkpoint.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model/flux2_config.h"
#include "core/quant/quantize_tensor.h"
#include "core/quant/weight_quant.h"
#include "core/tensor/safetensors.h"

namespace baton {

// Accepted sources: a diffusers transformer folder (config.json + diffusion_pytorch_model.safetensors, or
// shards listed in diffusion_pytorch_model.safetensors.index.json), a diffusers pipeline folder (its
// transformer/ subfolder), or the original BFL single file (flux2-dev.safetensors; config given separately).
// Files are memory-mapped and only the tensors a module asks for are read. Any of these may hold 8-bit weights
// with scales (`baton quantize` output, ComfyUI scaled fp8; layouts in core/quant/stored_quant.h).
class Flux2Checkpoint {
 public:
  // `config_path` is required for a BFL single file and optional otherwise (overrides config.json).
  static absl::StatusOr<std::unique_ptr<Flux2Checkpoint>> Open(const std::string& path,
                                                               const std::string& config_path = "");

  const Flux2Config& config() const { return config_; }
  bool is_bfl() const { return is_bfl_; }
  const std::string& path() const { return path_; }

  // Shape of a diffusers-named parameter as stored (after qkv split), or NotFound.
  absl::StatusOr<std::vector<int64_t>> Shape(const std::string& diffusers_name) const;
  // Reads one parameter by its diffusers name, converted to `dtype`. BFL files are mapped (qkv split,
  // final-layer halves swapped). An 8-bit stored weight is dequantized (to fp32 when dtype is Undefined).
  absl::StatusOr<at::Tensor> Load(const std::string& diffusers_name, at::ScalarType dtype) const;
  // The stored 8-bit form of a weight (data as stored, scale per row, BFL mapping applied), or nullopt when
  // the checkpoint holds it in full precision.
  absl::StatusOr<std::optional<QuantizedWeight>> LoadQuantized(const std::string& diffusers_name) const;
  // The safetensors dtype code a parameter is stored with ("BF16", "I8", ...), or NotFound.
  absl::StatusOr<std::string> StoredDtype(const std::string& diffusers_name) const;
  // The safetensors files behind the checkpoint (one, or the shards).
  std::vector<std::string> FilePaths() const;
  // kInt8 / kFp8 when the checkpoint's weights are stored in 8 bits (pre-quantized), else kNone.
  WeightQuant stored_quant() const { return stored_quant_; }
  // Every parameter in the checkpoint, expressed in diffusers names (unknown BFL keys kept verbatim;
  // quantization scales and markers left out: they belong to their weight).
  std::vector<std::string> DiffusersKeys() const;

 private:
  Flux2Checkpoint() = default;
  absl::StatusOr<const SafetensorsFile*> FileFor(const std::string& stored_key) const;
  absl::Status DetectStoredQuant();

  WeightQuant stored_quant_ = WeightQuant::kNone;

  std::string path_;
  Flux2Config config_;
  bool is_bfl_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> key_to_file_;  // stored key → file
};

// Loads every frozen (non-LoRA) parameter of `module` — whose parameter names are diffusers names — from
// the checkpoint, converting to the parameter's dtype and device. All problems are gathered into one
// InvalidArgument error listing missing keys, mis-shaped keys (expected vs found) and keys in the
// checkpoint that a FLUX.2 model of this config does not have.
absl::Status LoadFlux2Weights(torch::nn::Module& module, const Flux2Checkpoint& checkpoint);

// Deterministic random weights for `config`, written in the diffusers layout into `out_dir` (config.json +
// diffusion_pytorch_model.safetensors, or shards + index when max_shard_bytes > 0). Each tensor is drawn
// from a generator seeded by (seed, name), so values do not depend on order or sharding.
absl::Status WriteRandomFlux2Weights(const Flux2Config& config, const std::string& out_dir, uint64_t seed,
                                     at::ScalarType dtype = at::kFloat, int64_t max_shard_bytes = 0);

// The same random weights as a diffusers-named state dict (tests; small configs only).
std::map<std::string, at::Tensor> RandomFlux2StateDict(const Flux2Config& config, uint64_t seed,
                                                       at::ScalarType dtype = at::kFloat);

}  // namespace baton
