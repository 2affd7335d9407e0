// Loading a module's tensors from a checkpoint after checking all of them at once: every missing key, every
// mis-shaped one and every unexpected one go into a single error, so a wrong checkpoint is explained in one go.
// Shared by the transformer loaders (FLUX.2, Wan) and the VAE loaders.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/safetensors.h"

namespace baton {

// Where checked tensors come from: each key's stored shape (NotFound when absent) and its values in a dtype.
struct TensorSource {
  std::function<absl::StatusOr<std::vector<int64_t>>(const std::string& key)> shape;
  std::function<absl::StatusOr<at::Tensor>(const std::string& key, at::ScalarType dtype)> load;
};

// Copies each `wanted` tensor (a module's parameter or buffer, by name) from `source`, converting to the tensor's
// dtype, once all of them have been checked. Mismatches give one InvalidArgument:
// "<what>; missing keys: a, b; mis-shaped keys: c (expected [2], found [3]); unexpected keys: d".
// `unexpected`: the source keys the caller found that nothing should hold. `may_be_missing`: wanted names whose
// absence is fine (they keep their values).
absl::Status LoadCheckedTensors(const std::vector<std::pair<std::string, at::Tensor>>& wanted,
                                const TensorSource& source, const std::vector<std::string>& unexpected,
                                const std::string& what, const std::set<std::string>& may_be_missing = {});

// The parameters and (with `buffers`) the buffers of `module`, by name, for LoadCheckedTensors.
std::vector<std::pair<std::string, at::Tensor>> NamedTensors(const torch::nn::Module& module, bool buffers);

// LoadCheckedTensors for `module`'s parameters but those `skip` names (e.g. LoRA adapters), from a checkpoint object
// with `Shape(name)` (NotFound when absent) and `Load(name, dtype)`, such as Flux2Checkpoint and WanCheckpoint.
template <typename Checkpoint>
absl::Status LoadParametersFrom(torch::nn::Module& module, const Checkpoint& ckpt,
                                const std::function<bool(const std::string&)>& skip,
                                const std::vector<std::string>& unexpected, const std::string& what) {
  std::vector<std::pair<std::string, at::Tensor>> wanted;
  for (auto& [name, tensor] : NamedTensors(module, /*buffers=*/false)) {
    if (!skip(name)) wanted.emplace_back(name, tensor);
  }
  TensorSource source{[&](const std::string& key) { return ckpt.Shape(key); },
                      [&](const std::string& key, at::ScalarType dtype) { return ckpt.Load(key, dtype); }};
  return LoadCheckedTensors(wanted, source, unexpected, what);
}

// LoadCheckedTensors for `module`'s parameters (and `buffers`) from a diffusers model folder's safetensors
// (<stem>.safetensors, or the shards its index lists). Unexpected: the folder's keys that `ours` claims and the module
// lacks (a folder may hold more than the module loads, e.g. a VAE's decoder when only the encoder is built).
absl::Status LoadModuleFromFolder(torch::nn::Module& module, bool buffers, const std::string& dir,
                                  const std::string& stem, const std::function<bool(const std::string&)>& ours,
                                  const std::string& what, const std::set<std::string>& may_be_missing = {});

}  // namespace baton
