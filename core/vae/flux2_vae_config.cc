#include "core/vae/flux2_vae_config.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr absl::string_view kFlux2VaeSource = "VAE config";

using Shapes = std::map<std::string, std::vector<int64_t>>;

void AddConv(Shapes* s, const std::string& name, int64_t in, int64_t out, int64_t k) {
  (*s)[name + ".weight"] = {out, in, k, k};
  (*s)[name + ".bias"] = {out};
}

void AddGroupNorm(Shapes* s, const std::string& name, int64_t c) {
  (*s)[name + ".weight"] = {c};
  (*s)[name + ".bias"] = {c};
}

// diffusers ResnetBlock2D without a time embedding.
void AddResnet(Shapes* s, const std::string& name, int64_t in, int64_t out) {
  AddGroupNorm(s, name + ".norm1", in);
  AddConv(s, name + ".conv1", in, out, 3);
  AddGroupNorm(s, name + ".norm2", out);
  AddConv(s, name + ".conv2", out, out, 3);
  if (in != out) AddConv(s, name + ".conv_shortcut", in, out, 1);
}

// diffusers UNetMidBlock2D: resnets.0, (attentions.0), resnets.1, all at `c` channels.
void AddMidBlock(Shapes* s, const std::string& name, int64_t c, bool attention) {
  AddResnet(s, name + ".resnets.0", c, c);
  AddResnet(s, name + ".resnets.1", c, c);
  if (!attention) return;
  const std::string a = name + ".attentions.0";
  AddGroupNorm(s, a + ".group_norm", c);
  for (const char* proj : {".to_q", ".to_k", ".to_v", ".to_out.0"}) {
    (*s)[a + proj + ".weight"] = {c, c};
    (*s)[a + proj + ".bias"] = {c};
  }
}

}  // namespace

absl::Status Flux2VaeConfig::Validate() const {
  if (in_channels <= 0 || out_channels <= 0 || latent_channels <= 0 || layers_per_block <= 0 || norm_num_groups <= 0) {
    return absl::InvalidArgumentError("VAE config has a non-positive channel, layer or group count");
  }
  if (block_out_channels.empty()) return absl::InvalidArgumentError("VAE config: block_out_channels is empty");
  if (block_out_channels.size() > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAE config: ", block_out_channels.size(), " levels in block_out_channels (at most 8)"));
  }
  for (int64_t c : block_out_channels) {
    if (c <= 0 || c % norm_num_groups != 0) {
      return absl::InvalidArgumentError(absl::StrCat("VAE config: block_out_channels entry ", c,
                                                     " is not a positive multiple of norm_num_groups ",
                                                     norm_num_groups));
    }
  }
  if (down_block_types.size() != block_out_channels.size() || up_block_types.size() != block_out_channels.size()) {
    return absl::InvalidArgumentError(absl::StrCat("VAE config: ", down_block_types.size(), " down_block_types and ",
                                                   up_block_types.size(), " up_block_types for ",
                                                   block_out_channels.size(), " block_out_channels (must be equal)"));
  }
  for (const auto& t : down_block_types) {
    if (t != "DownEncoderBlock2D") {
      return absl::InvalidArgumentError(absl::StrCat("VAE config: unsupported down block type '", t, "'"));
    }
  }
  for (const auto& t : up_block_types) {
    if (t != "UpDecoderBlock2D") {
      return absl::InvalidArgumentError(absl::StrCat("VAE config: unsupported up block type '", t, "'"));
    }
  }
  if (act_fn != "silu" && act_fn != "swish") {
    return absl::InvalidArgumentError(absl::StrCat("VAE config: unsupported act_fn '", act_fn, "' (need silu)"));
  }
  if (patch_size[0] != 2 || patch_size[1] != 2) {
    // The FLUX.2 pipeline's _patchify_latents is hard-wired to 2×2.
    return absl::InvalidArgumentError(
        absl::StrCat("VAE config: patch_size [", patch_size[0], ", ", patch_size[1], "] (only [2, 2] supported)"));
  }
  if (!(batch_norm_eps > 0)) return absl::InvalidArgumentError("VAE config: batch_norm_eps must be positive");
  return absl::OkStatus();
}

absl::StatusOr<Flux2VaeConfig> ParseFlux2VaeConfig(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("VAE config is not a JSON object");
  Flux2VaeConfig c;
  RETURN_IF_ERROR(ReadJsonField(j, "in_channels", kFlux2VaeSource, &c.in_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "out_channels", kFlux2VaeSource, &c.out_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "down_block_types", kFlux2VaeSource, &c.down_block_types));
  RETURN_IF_ERROR(ReadJsonField(j, "up_block_types", kFlux2VaeSource, &c.up_block_types));
  RETURN_IF_ERROR(ReadJsonField(j, "block_out_channels", kFlux2VaeSource, &c.block_out_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "layers_per_block", kFlux2VaeSource, &c.layers_per_block));
  RETURN_IF_ERROR(ReadJsonField(j, "act_fn", kFlux2VaeSource, &c.act_fn));
  RETURN_IF_ERROR(ReadJsonField(j, "latent_channels", kFlux2VaeSource, &c.latent_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "norm_num_groups", kFlux2VaeSource, &c.norm_num_groups));
  RETURN_IF_ERROR(ReadJsonField(j, "force_upcast", kFlux2VaeSource, &c.force_upcast));
  RETURN_IF_ERROR(ReadJsonField(j, "use_quant_conv", kFlux2VaeSource, &c.use_quant_conv));
  RETURN_IF_ERROR(ReadJsonField(j, "use_post_quant_conv", kFlux2VaeSource, &c.use_post_quant_conv));
  RETURN_IF_ERROR(ReadJsonField(j, "mid_block_add_attention", kFlux2VaeSource, &c.mid_block_add_attention));
  RETURN_IF_ERROR(ReadJsonField(j, "batch_norm_eps", kFlux2VaeSource, &c.batch_norm_eps));
  RETURN_IF_ERROR(ReadJsonField(j, "batch_norm_momentum", kFlux2VaeSource, &c.batch_norm_momentum));
  // diffusers allows sample_size to be an int or a [h, w] pair (it then uses the first entry).
  auto it = j.find("sample_size");
  if (it != j.end() && it->is_array()) {
    std::vector<int64_t> v;
    RETURN_IF_ERROR(ReadJsonField(j, "sample_size", kFlux2VaeSource, &v));
    if (v.empty()) return absl::InvalidArgumentError("VAE config field 'sample_size': empty list");
    c.sample_size = v[0];
  } else {
    RETURN_IF_ERROR(ReadJsonField(j, "sample_size", kFlux2VaeSource, &c.sample_size));
  }
  std::vector<int64_t> patch = {c.patch_size[0], c.patch_size[1]};
  RETURN_IF_ERROR(ReadJsonField(j, "patch_size", kFlux2VaeSource, &patch));
  if (patch.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("VAE config field 'patch_size': ", patch.size(), " entries (need 2)"));
  }
  c.patch_size = {patch[0], patch[1]};
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<Flux2VaeConfig> LoadFlux2VaeConfig(const std::string& config_json_path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(config_json_path));
  auto config = ParseFlux2VaeConfig(text);
  if (!config.ok()) return Annotate(config.status(), config_json_path);
  return config;
}

std::string Flux2VaeConfigToJson(const Flux2VaeConfig& c) {
  nlohmann::ordered_json j;
  j["_class_name"] = "AutoencoderKLFlux2";
  j["act_fn"] = c.act_fn;
  j["batch_norm_eps"] = c.batch_norm_eps;
  j["batch_norm_momentum"] = c.batch_norm_momentum;
  j["block_out_channels"] = c.block_out_channels;
  j["down_block_types"] = c.down_block_types;
  j["force_upcast"] = c.force_upcast;
  j["in_channels"] = c.in_channels;
  j["latent_channels"] = c.latent_channels;
  j["layers_per_block"] = c.layers_per_block;
  j["mid_block_add_attention"] = c.mid_block_add_attention;
  j["norm_num_groups"] = c.norm_num_groups;
  j["out_channels"] = c.out_channels;
  j["patch_size"] = std::vector<int64_t>{c.patch_size[0], c.patch_size[1]};
  j["sample_size"] = c.sample_size;
  j["up_block_types"] = c.up_block_types;
  j["use_post_quant_conv"] = c.use_post_quant_conv;
  j["use_quant_conv"] = c.use_quant_conv;
  return j.dump(2);
}

std::map<std::string, std::vector<int64_t>> Flux2VaeTensorShapes(const Flux2VaeConfig& c) {
  Shapes s;
  const auto& ch = c.block_out_channels;
  const int64_t n = static_cast<int64_t>(ch.size());
  const int64_t lat = c.latent_channels;

  // Encoder (diffusers vae.Encoder with double_z=True).
  AddConv(&s, "encoder.conv_in", c.in_channels, ch[0], 3);
  for (int64_t i = 0; i < n; ++i) {
    const std::string b = absl::StrCat("encoder.down_blocks.", i);
    for (int64_t r = 0; r < c.layers_per_block; ++r) {
      AddResnet(&s, absl::StrCat(b, ".resnets.", r), r == 0 ? ch[i > 0 ? i - 1 : 0] : ch[i], ch[i]);
    }
    if (i != n - 1) AddConv(&s, b + ".downsamplers.0.conv", ch[i], ch[i], 3);
  }
  AddMidBlock(&s, "encoder.mid_block", ch[n - 1], c.mid_block_add_attention);
  AddGroupNorm(&s, "encoder.conv_norm_out", ch[n - 1]);
  AddConv(&s, "encoder.conv_out", ch[n - 1], 2 * lat, 3);

  // Decoder (diffusers vae.Decoder): channels reversed, layers_per_block + 1 resnets per up block.
  AddConv(&s, "decoder.conv_in", lat, ch[n - 1], 3);
  AddMidBlock(&s, "decoder.mid_block", ch[n - 1], c.mid_block_add_attention);
  int64_t prev = ch[n - 1];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t out = ch[n - 1 - i];
    const std::string b = absl::StrCat("decoder.up_blocks.", i);
    for (int64_t r = 0; r < c.layers_per_block + 1; ++r) {
      AddResnet(&s, absl::StrCat(b, ".resnets.", r), r == 0 ? prev : out, out);
    }
    if (i != n - 1) AddConv(&s, b + ".upsamplers.0.conv", out, out, 3);
    prev = out;
  }
  AddGroupNorm(&s, "decoder.conv_norm_out", ch[0]);
  AddConv(&s, "decoder.conv_out", ch[0], c.out_channels, 3);

  if (c.use_quant_conv) AddConv(&s, "quant_conv", 2 * lat, 2 * lat, 1);
  if (c.use_post_quant_conv) AddConv(&s, "post_quant_conv", lat, lat, 1);
  s["bn.running_mean"] = {c.patched_channels()};
  s["bn.running_var"] = {c.patched_channels()};
  s["bn.num_batches_tracked"] = {};
  return s;
}

bool IsFlux2VaeEncoderKey(const std::string& name) {
  return absl::StartsWith(name, "encoder.") || absl::StartsWith(name, "quant_conv.") || absl::StartsWith(name, "bn.");
}

Flux2VaeConfig TinyFlux2VaeConfig() {
  Flux2VaeConfig c;
  c.block_out_channels = {16, 32, 32, 32};
  c.layers_per_block = 1;
  c.norm_num_groups = 8;
  c.sample_size = 32;
  return c;
}

}  // namespace baton
