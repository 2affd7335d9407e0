#include "core/vae/flux2_vae_decoder.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <vector>

#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/vae/flux2_vae.h"
#include "core/vae/flux2_vae_blocks.h"

namespace baton {
namespace {

// diffusers Upsample2D(use_conv=True): nearest ×2, then a 3×3 conv named `conv`.
class Upsample2DImpl : public torch::nn::Module {
 public:
  explicit Upsample2DImpl(int64_t channels) { conv = register_module("conv", MakeConv(channels, channels, 3, 1, 1)); }
  at::Tensor forward(const at::Tensor& x) {
    return conv->forward(at::upsample_nearest2d(x, {x.size(2) * 2, x.size(3) * 2}));
  }
  torch::nn::Conv2d conv{nullptr};
};
TORCH_MODULE(Upsample2D);

// diffusers UpDecoderBlock2D: `num_layers` resnets (in → out, then out → out), then an Upsample2D unless last.
class UpDecoderBlock2DImpl : public torch::nn::Module {
 public:
  UpDecoderBlock2DImpl(int64_t in, int64_t out, int64_t num_layers, int64_t groups, bool add_upsample) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    for (int64_t i = 0; i < num_layers; ++i) {
      resnet_list_.push_back(ResnetBlock2D(i == 0 ? in : out, out, groups));
      resnets->push_back(resnet_list_.back());
    }
    if (add_upsample) {
      upsamplers = register_module("upsamplers", torch::nn::ModuleList());
      upsample_ = Upsample2D(out);
      upsamplers->push_back(upsample_);
    }
  }
  at::Tensor forward(at::Tensor h) {
    for (auto& r : resnet_list_) h = r->forward(h);
    return upsample_ ? upsample_->forward(h) : h;
  }
  torch::nn::ModuleList resnets{nullptr}, upsamplers{nullptr};

 private:
  std::vector<ResnetBlock2D> resnet_list_;
  Upsample2D upsample_{nullptr};
};
TORCH_MODULE(UpDecoderBlock2D);

// diffusers vae.Decoder: conv_in → mid_block → up_blocks (reversed channels) → GroupNorm → SiLU → conv_out.
class VaeDecoderImpl : public torch::nn::Module {
 public:
  explicit VaeDecoderImpl(const Flux2VaeConfig& c) {
    std::vector<int64_t> ch(c.block_out_channels.rbegin(), c.block_out_channels.rend());
    const int64_t n = static_cast<int64_t>(ch.size()), groups = c.norm_num_groups;
    conv_in = register_module("conv_in", MakeConv(c.latent_channels, ch[0], 3, 1, 1));
    mid_block = register_module("mid_block", UNetMidBlock2D(ch[0], groups, c.mid_block_add_attention));
    up_blocks = register_module("up_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < n; ++i) {
      block_list_.push_back(
          UpDecoderBlock2D(ch[i > 0 ? i - 1 : 0], ch[i], c.layers_per_block + 1, groups, /*add_upsample=*/i != n - 1));
      up_blocks->push_back(block_list_.back());
    }
    conv_norm_out = register_module("conv_norm_out", MakeGroupNorm(groups, ch[n - 1], kVaeGroupNormEps));
    conv_out = register_module("conv_out", MakeConv(ch[n - 1], c.out_channels, 3, 1, 1));
  }
  at::Tensor forward(const at::Tensor& z) {
    at::Tensor h = mid_block->forward(conv_in->forward(z));
    for (auto& block : block_list_) h = block->forward(h);
    return conv_out->forward(at::silu(conv_norm_out->forward(h)));
  }
  torch::nn::Conv2d conv_in{nullptr}, conv_out{nullptr};
  UNetMidBlock2D mid_block{nullptr};
  torch::nn::ModuleList up_blocks{nullptr};
  torch::nn::GroupNorm conv_norm_out{nullptr};

 private:
  std::vector<UpDecoderBlock2D> block_list_;
};
TORCH_MODULE(VaeDecoder);

// The decoder half of AutoencoderKLFlux2: post_quant_conv, decoder, and the latent BatchNorm's statistics.
class DecoderHalfImpl : public torch::nn::Module {
 public:
  explicit DecoderHalfImpl(const Flux2VaeConfig& c) {
    decoder = register_module("decoder", VaeDecoder(c));
    if (c.use_post_quant_conv) {
      post_quant_conv = register_module("post_quant_conv", MakeConv(c.latent_channels, c.latent_channels, 1, 1, 0));
    }
    bn = register_module("bn", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(c.patched_channels())
                                                          .eps(c.batch_norm_eps)
                                                          .affine(false)
                                                          .track_running_stats(true)));
  }
  VaeDecoder decoder{nullptr};
  torch::nn::Conv2d post_quant_conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(DecoderHalf);

bool IsDecoderKey(const std::string& k) {
  return absl::StartsWith(k, "decoder.") || absl::StartsWith(k, "post_quant_conv.") || absl::StartsWith(k, "bn.");
}

class Flux2VaeDecoderImpl : public Flux2VaeDecoder {
 public:
  Flux2VaeDecoderImpl(Flux2VaeConfig config, DecoderHalf module, at::ScalarType dtype, at::Device device)
      : config_(std::move(config)), module_(std::move(module)), dtype_(dtype), device_(device) {
    module_->eval();
    for (auto& p : module_->parameters()) p.set_requires_grad(false);
  }
  const Flux2VaeConfig& config() const override { return config_; }

  absl::StatusOr<at::Tensor> Decode(const at::Tensor& latents) override {
    if (!latents.defined() || latents.dim() != 4 || latents.size(1) != config_.latent_channels ||
        latents.size(0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("VAE decoder input must be [B, ", config_.latent_channels, ", h, w], got ",
                       latents.defined() ? ShapeString(latents.sizes()) : "an undefined tensor"));
    }
    at::Tensor pixels;
    RETURN_IF_ERROR(TorchCall("VAE decode", [&] {
      at::NoGradGuard no_grad;
      at::Tensor z = latents.to(device_, dtype_);
      if (module_->post_quant_conv) z = module_->post_quant_conv->forward(z);
      pixels = module_->decoder->forward(z).to(at::kFloat);
    }));
    return pixels;
  }

  absl::StatusOr<at::Tensor> DecodeTokens(const at::Tensor& tokens, int64_t gh, int64_t gw) override {
    const int64_t c = config_.patched_channels();
    if (!tokens.defined() || tokens.dim() != 3 || tokens.size(1) != gh * gw || tokens.size(2) != c || gh <= 0 ||
        gw <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("VAE decoder tokens must be [B, ", gh, "·", gw, ", ", c, "], got ",
                       tokens.defined() ? ShapeString(tokens.sizes()) : "an undefined tensor"));
    }
    const int64_t b = tokens.size(0), l = config_.latent_channels;
    at::Tensor x =
        tokens.to(device_, at::kFloat).permute({0, 2, 1}).reshape({b, c, gh, gw});  // _unpack_latents_with_ids
    at::Tensor mean = module_->bn->running_mean.to(at::kFloat).view({1, c, 1, 1});
    at::Tensor std = at::sqrt(module_->bn->running_var.to(at::kFloat).view({1, c, 1, 1}) + config_.batch_norm_eps);
    x = x * std + mean;
    // _unpatchify_latents: channel ch·4 + 2·dy + dx → latent channel ch at (2i + dy, 2j + dx).
    x = x.reshape({b, l, 2, 2, gh, gw}).permute({0, 1, 4, 2, 5, 3}).reshape({b, l, gh * 2, gw * 2});
    return Decode(x);
  }

 private:
  Flux2VaeConfig config_;
  DecoderHalf module_;
  at::ScalarType dtype_;
  at::Device device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Flux2VaeDecoder>> Flux2VaeDecoder::Load(const std::string& vae_dir, at::ScalarType dtype,
                                                                       at::Device device) {
  if (!at::isFloatingType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("VAE dtype must be floating, got ", c10::toString(dtype)));
  }
  const std::string dir = ResolveVaeDir(vae_dir);
  ASSIGN_OR_RETURN(Flux2VaeConfig config, LoadFlux2VaeConfig(JoinPath(dir, "config.json")));
  DecoderHalf module{nullptr};
  RETURN_IF_ERROR(TorchCall("building the VAE decoder", [&] {
    module = DecoderHalf(config);
    module->decoder->to(dtype);  // bn's statistics (and its int64 counter) keep their dtype
    if (module->post_quant_conv) module->post_quant_conv->to(dtype);
  }));
  RETURN_IF_ERROR(LoadVaeTensors(*module, dir, IsDecoderKey));
  RETURN_IF_ERROR(TorchCall("moving the VAE decoder", [&] { module->to(device); }));
  return std::unique_ptr<Flux2VaeDecoder>(new Flux2VaeDecoderImpl(config, std::move(module), dtype, device));
}

}  // namespace baton
