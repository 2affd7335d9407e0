#include "core/vae/wan_vae.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/tensor/checked_load.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {

WanVaeEncoder::WanVaeEncoder(const WanVaeConfig& config, WanVaeEncoderModule module)
    : config_(config),
      module_(std::move(module)),
      dtype_(module_->quant_conv->weight.scalar_type()),
      device_(module_->quant_conv->weight.device()) {
  module_->eval();
  for (auto& p : module_->parameters()) p.set_requires_grad(false);
}

absl::StatusOr<std::unique_ptr<WanVaeEncoder>> WanVaeEncoder::Load(const std::string& vae_dir, at::ScalarType dtype,
                                                                   at::Device device) {
  ASSIGN_OR_RETURN(const std::string dir, WanVaeFolder(vae_dir, at::isFloatingType(dtype), c10::toString(dtype)));
  ASSIGN_OR_RETURN(WanVaeConfig config, LoadWanVaeConfig(JoinPath(dir, "config.json")));
  WanVaeEncoderModule module{nullptr};
  RETURN_IF_ERROR(TorchCall("building the Wan VAE encoder", [&] {
    module = WanVaeEncoderModule(config);
    module->to(dtype);
  }));
  RETURN_IF_ERROR(LoadModuleFromFolder(*module, /*buffers=*/false, dir, "diffusion_pytorch_model", IsWanVaeEncoderKey,
                                       absl::StrCat("Wan VAE weights in ", dir, " do not match its config.json")));
  RETURN_IF_ERROR(TorchCall("moving the Wan VAE encoder", [&] { module->to(device); }));
  return std::make_unique<WanVaeEncoder>(config, std::move(module));
}

absl::StatusOr<at::Tensor> WanVaeEncoder::EncodeMoments(const at::Tensor& pixels) {
  if (!pixels.defined() || (pixels.dim() != 4 && pixels.dim() != 5) || pixels.size(1) != config_.pixel_channels() ||
      !at::isFloatingType(pixels.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE input must be a floating [B, ", config_.pixel_channels(),
                                                   ", F, H, W] or [B, ", config_.pixel_channels(),
                                                   ", H, W] tensor, got ", DtypeShapeString(pixels)));
  }
  at::Tensor x = pixels.dim() == 4 ? pixels.unsqueeze(2) : pixels;
  const int64_t multiple = config_.spatial_factor();
  const int64_t b = x.size(0), f = x.size(2), h = x.size(3), w = x.size(4);
  if (b == 0 || f == 0 || (f - 1) % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wan VAE input ", ShapeString(pixels.sizes()),
                     ": batch must be non-empty and the frame count 4k+1 (1, 5, 9, ...)"));
  }
  if (h == 0 || w == 0 || h % multiple != 0 || w % multiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE input ", ShapeString(pixels.sizes()),
                                                   ": H and W must be positive multiples of ", multiple));
  }
  at::Tensor moments;
  RETURN_IF_ERROR(TorchCall("Wan VAE encode", [&] {
    at::NoGradGuard no_grad;
    moments = module_->forward(x.to(device_, dtype_)).to(at::kFloat);
  }));
  return moments;
}

absl::StatusOr<at::Tensor> WanVaeEncoder::EncodeMean(const at::Tensor& pixels) {
  ASSIGN_OR_RETURN(at::Tensor moments, EncodeMoments(pixels));
  return moments.narrow(1, 0, config_.z_dim).contiguous();
}

at::Tensor WanVaeEncoder::Normalize(const at::Tensor& latents) const {
  TORCH_CHECK(latents.defined() && latents.dim() >= 2 && latents.size(1) == config_.z_dim,
              "Wan VAE Normalize: expected [B, ", config_.z_dim, ", ...] latents");
  std::vector<int64_t> view(latents.dim(), 1);
  view[1] = config_.z_dim;
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor mean = at::tensor(config_.latents_mean, opts).to(latents.device(), at::kFloat).view(view);
  at::Tensor std = at::tensor(config_.latents_std, opts).to(latents.device(), at::kFloat).view(view);
  // diffusers multiplies by 1 / std computed in fp32; the same here.
  return (latents.to(at::kFloat) - mean) * (1.0 / std);
}

}  // namespace baton
