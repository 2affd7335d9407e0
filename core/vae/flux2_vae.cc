#include "core/vae/flux2_vae.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "core/tensor/checked_load.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kSingleFile[] = "diffusion_pytorch_model.safetensors";
constexpr char kNumBatchesTracked[] = "bn.num_batches_tracked";

at::Tensor RandomVaeTensor(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(MixSeed(seed, HashName(name)));
  if (name == kNumBatchesTracked) return at::zeros(shape, at::kLong);
  if (name == "bn.running_mean") return 0.5 * at::randn(shape, gen, at::kFloat);
  if (name == "bn.running_var") return 0.5 + at::rand(shape, gen, at::kFloat);
  if (shape.size() >= 2) {
    int64_t fan_in = 1;
    for (size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
    return at::randn(shape, gen, at::kFloat) / std::sqrt(static_cast<double>(fan_in));
  }
  // GroupNorms are the only 1-D tensors whose module name contains "norm" (norm1, norm2, group_norm,
  // conv_norm_out); everything else 1-D is a conv/linear bias.
  const bool is_norm = absl::StrContains(name, "norm");
  if (is_norm && absl::EndsWith(name, ".weight")) return 1.0 + 0.1 * at::randn(shape, gen, at::kFloat);
  return (is_norm ? 0.1 : 0.02) * at::randn(shape, gen, at::kFloat);
}

}  // namespace

std::string ResolveVaeDir(const std::string& vae_dir) {
  if (!PathExists(JoinPath(vae_dir, "config.json")) && PathExists(JoinPath(vae_dir, "vae/config.json"))) {
    return JoinPath(vae_dir, "vae");  // a diffusers pipeline folder
  }
  return vae_dir;
}

absl::Status LoadVaeTensors(torch::nn::Module& module, const std::string& dir,
                            const std::function<bool(const std::string&)>& ours) {
  return LoadModuleFromFolder(module, /*buffers=*/true, dir, "diffusion_pytorch_model", ours,
                              absl::StrCat("VAE weights in ", dir, " do not match its config.json"),
                              {kNumBatchesTracked});
}

Flux2VaeEncoder::Flux2VaeEncoder(const Flux2VaeConfig& config, AutoencoderKLFlux2Encoder module)
    : config_(config),
      module_(std::move(module)),
      dtype_(module_->encoder->conv_in->weight.scalar_type()),
      device_(module_->encoder->conv_in->weight.device()) {
  module_->eval();
  for (auto& p : module_->parameters()) p.set_requires_grad(false);
}

absl::StatusOr<std::unique_ptr<Flux2VaeEncoder>> Flux2VaeEncoder::Load(const std::string& vae_dir, at::ScalarType dtype,
                                                                       at::Device device) {
  if (!at::isFloatingType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("VAE dtype must be floating, got ", c10::toString(dtype)));
  }
  const std::string dir = ResolveVaeDir(vae_dir);
  ASSIGN_OR_RETURN(Flux2VaeConfig config, LoadFlux2VaeConfig(JoinPath(dir, "config.json")));
  AutoencoderKLFlux2Encoder module{nullptr};
  RETURN_IF_ERROR(TorchCall("building the VAE encoder", [&] {
    module = AutoencoderKLFlux2Encoder(config);
    // Module::to(dtype) would also convert bn's int64 counter, so only the weighted parts change dtype.
    module->encoder->to(dtype);
    if (module->quant_conv) module->quant_conv->to(dtype);
  }));
  RETURN_IF_ERROR(LoadVaeTensors(*module, dir, IsFlux2VaeEncoderKey));
  RETURN_IF_ERROR(TorchCall("moving the VAE encoder", [&] { module->to(device); }));
  return std::make_unique<Flux2VaeEncoder>(config, std::move(module));
}

absl::StatusOr<at::Tensor> Flux2VaeEncoder::EncodeMoments(const at::Tensor& pixels) {
  const int64_t multiple = config_.pixel_multiple();
  if (!pixels.defined() || pixels.dim() != 4 || pixels.size(1) != config_.in_channels ||
      !at::isFloatingType(pixels.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VAE input must be a floating [B, ", config_.in_channels, ", H, W] tensor, got ",
        pixels.defined() ? absl::StrCat(c10::toString(pixels.scalar_type()), " ", ShapeString(pixels.sizes()))
                         : "an undefined tensor"));
  }
  const int64_t b = pixels.size(0), h = pixels.size(2), w = pixels.size(3);
  if (b == 0 || h == 0 || w == 0 || h % multiple != 0 || w % multiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat("VAE input ", ShapeString(pixels.sizes()),
                                                   ": batch must be non-empty and H, W positive multiples of ",
                                                   multiple));
  }
  at::Tensor moments;
  RETURN_IF_ERROR(TorchCall("VAE encode", [&] {
    at::NoGradGuard no_grad;
    moments = module_->forward(pixels.to(device_, dtype_)).to(at::kFloat);
  }));
  return moments;
}

absl::StatusOr<at::Tensor> Flux2VaeEncoder::EncodeMean(const at::Tensor& pixels) {
  ASSIGN_OR_RETURN(at::Tensor moments, EncodeMoments(pixels));
  return moments.narrow(1, 0, config_.latent_channels).contiguous();
}

absl::StatusOr<at::Tensor> Flux2VaeEncoder::EncodeSample(const at::Tensor& pixels, uint64_t seed) {
  ASSIGN_OR_RETURN(at::Tensor moments, EncodeMoments(pixels));
  const int64_t l = config_.latent_channels;
  at::Tensor mean = moments.narrow(1, 0, l);
  at::Tensor std = at::exp(0.5 * at::clamp(moments.narrow(1, l, l), -30.0, 20.0));
  auto gen = at::detail::createCPUGenerator(seed);
  at::Tensor eps = at::randn(mean.sizes(), gen, at::kFloat).to(mean.device());
  return mean + std * eps;
}

at::Tensor Flux2VaeEncoder::PatchifyAndNormalize(const at::Tensor& latents) const {
  TORCH_CHECK(latents.defined() && latents.dim() == 4 && latents.size(1) == config_.latent_channels &&
                  latents.size(2) % 2 == 0 && latents.size(3) % 2 == 0,
              "PatchifyAndNormalize: expected [B, ", config_.latent_channels, ", h, w] with even h, w, got ",
              latents.defined() ? latents.sizes() : at::IntArrayRef{});
  at::NoGradGuard no_grad;
  const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2), w = latents.size(3);
  at::Tensor x = latents.to(at::kFloat)
                     .reshape({b, c, h / 2, 2, w / 2, 2})
                     .permute({0, 1, 3, 5, 2, 4})
                     .reshape({b, 4 * c, h / 2, w / 2});  // [B, 4C, h/2, w/2]
  at::Tensor mean = module_->bn->running_mean.to(x.device(), at::kFloat).view({1, -1, 1, 1});
  at::Tensor std =
      at::sqrt(module_->bn->running_var.to(x.device(), at::kFloat) + config_.batch_norm_eps).view({1, -1, 1, 1});
  x = (x - mean) / std;
  return x.reshape({b, 4 * c, (h / 2) * (w / 2)}).permute({0, 2, 1}).contiguous();  // [B, hw/4, 4C]
}

absl::Status WriteRandomFlux2Vae(const Flux2VaeConfig& config, const std::string& vae_dir, uint64_t seed) {
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(MakeDirs(vae_dir));
  std::map<std::string, at::Tensor> tensors;
  RETURN_IF_ERROR(TorchCall("random VAE weights", [&] {
    for (const auto& [name, shape] : Flux2VaeTensorShapes(config)) tensors[name] = RandomVaeTensor(name, shape, seed);
  }));
  RETURN_IF_ERROR(WriteSafetensors(JoinPath(vae_dir, kSingleFile), tensors, {{"format", "pt"}}));
  return WriteFileAtomic(JoinPath(vae_dir, "config.json"), Flux2VaeConfigToJson(config));
}

}  // namespace baton
