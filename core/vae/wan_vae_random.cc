#include "core/vae/wan_vae_random.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/tensor/safetensors.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"
#include "core/vae/wan_vae_blocks.h"
#include "core/vae/wan_vae_decoder.h"
#include "core/vae/wan_vae_decoder_blocks.h"

namespace baton {
namespace {

// Conv weights N(0, 1/fan_in), biases N(0, 0.02²), RMS-norm gammas 1 + N(0, 0.1²), from a generator seeded by
// (seed, name).
at::Tensor RandomWanVaeTensor(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(MixSeed(seed, HashName(name)));
  if (absl::EndsWith(name, ".gamma")) return 1.0 + 0.1 * at::randn(shape, gen, at::kFloat);
  if (shape.size() >= 2) {
    int64_t fan_in = 1;
    for (size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
    return at::randn(shape, gen, at::kFloat) / std::sqrt(static_cast<double>(fan_in));
  }
  return 0.02 * at::randn(shape, gen, at::kFloat);
}

// `modules`' parameters drawn by RandomWanVaeTensor, written with the config as a diffusers vae/ folder.
absl::Status WriteRandomModules(const WanVaeConfig& config, const std::vector<torch::nn::Module*>& modules,
                                const std::string& vae_dir, uint64_t seed) {
  RETURN_IF_ERROR(MakeDirs(vae_dir));
  std::map<std::string, at::Tensor> tensors;
  RETURN_IF_ERROR(TorchCall("random Wan VAE weights", [&] {
    for (const torch::nn::Module* module : modules) {
      for (const auto& p : module->named_parameters()) {
        tensors[p.key()] = RandomWanVaeTensor(p.key(), p.value().sizes().vec(), seed);
      }
    }
  }));
  RETURN_IF_ERROR(
      WriteSafetensors(JoinPath(vae_dir, "diffusion_pytorch_model.safetensors"), tensors, {{"format", "pt"}}));
  return WriteFileAtomic(JoinPath(vae_dir, "config.json"), WanVaeConfigToJson(config));
}

}  // namespace

absl::Status WriteRandomWanVae(const WanVaeConfig& config, const std::string& vae_dir, uint64_t seed) {
  RETURN_IF_ERROR(ValidateWanVaeDecoderConfig(config));
  WanVaeEncoderModule encoder{nullptr};
  WanVaeDecoderModule decoder{nullptr};
  RETURN_IF_ERROR(TorchCall("building a Wan VAE", [&] {
    encoder = WanVaeEncoderModule(config);
    decoder = WanVaeDecoderModule(config);
  }));
  return WriteRandomModules(config, {encoder.get(), decoder.get()}, vae_dir, seed);
}

absl::Status WriteRandomWanVaeEncoder(const WanVaeConfig& config, const std::string& vae_dir, uint64_t seed) {
  RETURN_IF_ERROR(config.Validate());
  WanVaeEncoderModule encoder{nullptr};
  RETURN_IF_ERROR(TorchCall("building a Wan VAE encoder", [&] { encoder = WanVaeEncoderModule(config); }));
  return WriteRandomModules(config, {encoder.get()}, vae_dir, seed);
}

}  // namespace baton
