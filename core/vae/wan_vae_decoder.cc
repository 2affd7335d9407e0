#include "core/vae/wan_vae_decoder.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <utility>
#include <vector>

#include "core/tensor/checked_load.h"
#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

// latents_mean / latents_std as [1, z_dim, 1, 1, 1] tensors of `like`'s dtype and device (the pipeline builds them
// in fp32 with torch.tensor, then casts).
at::Tensor ChannelStat(const std::vector<double>& values, const at::Tensor& like) {
  std::vector<int64_t> view(like.dim(), 1);
  view[1] = static_cast<int64_t>(values.size());
  return at::tensor(values, at::TensorOptions().dtype(at::kDouble))
      .to(at::kFloat)
      .view(view)
      .to(like.device(), like.scalar_type());
}

}  // namespace

bool IsWanVaeDecoderKey(const std::string& name) {
  return absl::StartsWith(name, "decoder.") || absl::StartsWith(name, "post_quant_conv.");
}

absl::Status ValidateWanVaeDecoderConfig(const WanVaeConfig& c) {
  RETURN_IF_ERROR(c.Validate());
  const int64_t p2 = c.patch() * c.patch();
  if (c.out_channels <= 0 || c.out_channels % p2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE config: out_channels ", c.out_channels,
                                                   " must be a positive multiple of patch_size² = ", p2));
  }
  if (c.decoder_base_dim.has_value() && *c.decoder_base_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wan VAE config: decoder_base_dim ", *c.decoder_base_dim, " must be positive"));
  }
  if (c.is_residual) {
    const int64_t dim = c.decoder_base_dim.value_or(c.base_dim);
    const size_t levels = c.dim_mult.size();
    const std::vector<bool> up(c.temperal_downsample.rbegin(), c.temperal_downsample.rend());
    int64_t in = dim * c.dim_mult.back();
    for (size_t i = 0; i + 1 < levels; ++i) {
      const int64_t out = dim * c.dim_mult[levels - 1 - i];
      const int64_t factor = (up[i] ? 2 : 1) * 4;
      if (out * factor % in != 0) {
        return absl::InvalidArgumentError(absl::StrCat("Wan VAE config: decoder up block ", i, " (DupUp3D ", in, " → ",
                                                       out, " channels, factor ", factor,
                                                       "): out channels times the factor must be divisible by in"));
      }
      in = out;
    }
  }
  return absl::OkStatus();
}

int64_t WanVaeDecoderTemporalFactor(const WanVaeConfig& c) {
  const std::vector<bool> up(c.temperal_downsample.rbegin(), c.temperal_downsample.rend());
  int64_t f = 1;
  for (size_t i = 0; i + 1 < c.dim_mult.size() && i < up.size(); ++i) f *= up[i] ? 2 : 1;
  return f;
}

WanVaeDecoder::WanVaeDecoder(const WanVaeConfig& config, WanVaeDecoderModule module)
    : config_(config),
      module_(std::move(module)),
      dtype_(module_->post_quant_conv->weight.scalar_type()),
      device_(module_->post_quant_conv->weight.device()) {
  module_->eval();
  for (auto& p : module_->parameters()) p.set_requires_grad(false);
}

absl::StatusOr<std::unique_ptr<WanVaeDecoder>> WanVaeDecoder::Load(const std::string& vae_dir, at::ScalarType dtype,
                                                                   at::Device device) {
  ASSIGN_OR_RETURN(const std::string dir, WanVaeFolder(vae_dir, at::isFloatingType(dtype), c10::toString(dtype)));
  const std::string config_path = JoinPath(dir, "config.json");
  ASSIGN_OR_RETURN(WanVaeConfig config, LoadWanVaeConfig(config_path));
  RETURN_IF_ERROR(Annotate(ValidateWanVaeDecoderConfig(config), config_path));
  WanVaeDecoderModule module{nullptr};
  RETURN_IF_ERROR(TorchCall("building the Wan VAE decoder", [&] {
    module = WanVaeDecoderModule(config);
    module->to(dtype);
  }));
  RETURN_IF_ERROR(
      LoadModuleFromFolder(*module, /*buffers=*/false, dir, "diffusion_pytorch_model", IsWanVaeDecoderKey,
                           absl::StrCat("Wan VAE decoder weights in ", dir, " do not match its config.json")));
  RETURN_IF_ERROR(TorchCall("moving the Wan VAE decoder", [&] { module->to(device); }));
  return std::make_unique<WanVaeDecoder>(config, std::move(module));
}

int64_t WanVaeDecoder::PixelFrames(int64_t latent_frames) const {
  return 1 + WanVaeDecoderTemporalFactor(config_) * (latent_frames - 1);
}

absl::Status WanVaeDecoder::CheckLatents(const at::Tensor& latents) const {
  if (!latents.defined() || latents.dim() != 5 || latents.size(1) != config_.z_dim ||
      !at::isFloatingType(latents.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE decoder input must be a floating [B, ", config_.z_dim,
                                                   ", F', H', W'] latent tensor (z_dim ", config_.z_dim, "), got ",
                                                   DtypeShapeString(latents)));
  }
  if (latents.numel() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE decoder input ", ShapeString(latents.sizes()),
                                                   ": batch, frames, height and width must be non-empty"));
  }
  return absl::OkStatus();
}

at::Tensor WanVaeDecoder::Denormalize(const at::Tensor& z) const {
  TORCH_CHECK(z.defined() && z.dim() >= 2 && z.size(1) == config_.z_dim, "Wan VAE Denormalize: expected [B, ",
              config_.z_dim, ", ...] latents");
  // WanPipeline.__call__: latents_std = 1.0 / std (in the latents' dtype); latents / latents_std + latents_mean.
  at::Tensor inv_std = at::reciprocal(ChannelStat(config_.latents_std, z));  // torch's 1.0 / t
  return z / inv_std + ChannelStat(config_.latents_mean, z);
}

absl::StatusOr<at::Tensor> WanVaeDecoder::Run(const at::Tensor& z) {
  at::Tensor pixels;
  RETURN_IF_ERROR(TorchCall("Wan VAE decode", [&] {
    at::NoGradGuard no_grad;
    pixels = module_->forward(z).to(at::kFloat);
  }));
  return pixels;
}

absl::StatusOr<at::Tensor> WanVaeDecoder::Decode(const at::Tensor& latents) {
  RETURN_IF_ERROR(CheckLatents(latents));
  at::Tensor z;
  RETURN_IF_ERROR(TorchCall("Wan VAE un-normalise", [&] { z = Denormalize(latents.to(device_, dtype_)); }));
  return Run(z);
}

absl::StatusOr<at::Tensor> WanVaeDecoder::DecodeRaw(const at::Tensor& latents) {
  RETURN_IF_ERROR(CheckLatents(latents));
  return Run(latents.to(device_, dtype_));
}

}  // namespace baton
