#include "core/vae/wan_vae_config.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr absl::string_view kWanVaeSource = "Wan VAE config";
constexpr char kClassName[] = "AutoencoderKLWan";

}  // namespace

WanVaeConfig::WanVaeConfig()
    : latents_mean({-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517,
                    -0.3632, -0.1922, -0.9497, 0.2503, -0.2921}),
      latents_std({2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
                   1.6382, 1.1253, 2.8251, 1.9160}) {}

int64_t WanVaeConfig::temporal_factor() const {
  int64_t f = 1;
  for (size_t i = 0; i + 1 < dim_mult.size() && i < temperal_downsample.size(); ++i)
    f *= temperal_downsample[i] ? 2 : 1;
  return f;
}

absl::Status WanVaeConfig::Validate() const {
  if (patch_size.has_value() && (*patch_size < 1 || in_channels % (*patch_size * *patch_size) != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE config: patch_size ", *patch_size,
                                                   " must be >= 1 and its square divide in_channels ", in_channels));
  }
  if (!attn_scales.empty()) {
    // Every released Wan VAE has none, and diffusers' own WanEncoder3d cannot run them (its down-block
    // WanAttentionBlock is called with feat_cache), so there is no upstream behaviour to match.
    return absl::UnimplementedError(
        "Wan VAE config: attn_scales (attention inside the encoder's down blocks) is not "
        "supported; released Wan VAEs have attn_scales []");
  }
  if (base_dim <= 0 || z_dim <= 0 || num_res_blocks <= 0 || in_channels <= 0 || dim_mult.empty()) {
    return absl::InvalidArgumentError(
        "Wan VAE config: base_dim, z_dim, num_res_blocks, in_channels must be positive "
        "and dim_mult non-empty");
  }
  for (int64_t m : dim_mult) {
    if (m <= 0) return absl::InvalidArgumentError(absl::StrCat("Wan VAE config: dim_mult entry ", m, " <= 0"));
  }
  if (dim_mult.size() > 8) return absl::InvalidArgumentError("Wan VAE config: more than 8 levels in dim_mult");
  if (temperal_downsample.size() + 1 < dim_mult.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE config: temperal_downsample has ",
                                                   temperal_downsample.size(), " entries for ", dim_mult.size(),
                                                   " levels (need ", dim_mult.size() - 1, ")"));
  }
  if (static_cast<int64_t>(latents_mean.size()) != z_dim || static_cast<int64_t>(latents_std.size()) != z_dim) {
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE config: latents_mean has ", latents_mean.size(),
                                                   " and latents_std ", latents_std.size(), " entries; z_dim is ",
                                                   z_dim));
  }
  for (double s : latents_std) {
    if (s == 0.0) return absl::InvalidArgumentError("Wan VAE config: latents_std has a zero entry");
  }
  return absl::OkStatus();
}

absl::StatusOr<WanVaeConfig> ParseWanVaeConfig(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(kWanVaeSource, ": not a JSON object"));
  std::string class_name = kClassName;
  RETURN_IF_ERROR(ReadJsonField(j, "_class_name", kWanVaeSource, &class_name));
  if (class_name != kClassName) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWanVaeSource, ": _class_name is '", class_name, "', expected '", kClassName, "'"));
  }
  WanVaeConfig c;
  RETURN_IF_ERROR(ReadJsonField(j, "base_dim", kWanVaeSource, &c.base_dim));
  int64_t decoder_base_dim = 0;
  bool found = false;
  RETURN_IF_ERROR(ReadJsonField(j, "decoder_base_dim", kWanVaeSource, &decoder_base_dim, &found));
  if (found) c.decoder_base_dim = decoder_base_dim;
  RETURN_IF_ERROR(ReadJsonField(j, "z_dim", kWanVaeSource, &c.z_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "dim_mult", kWanVaeSource, &c.dim_mult));
  RETURN_IF_ERROR(ReadJsonField(j, "num_res_blocks", kWanVaeSource, &c.num_res_blocks));
  RETURN_IF_ERROR(ReadJsonField(j, "attn_scales", kWanVaeSource, &c.attn_scales));
  RETURN_IF_ERROR(ReadJsonField(j, "temperal_downsample", kWanVaeSource, &c.temperal_downsample));
  RETURN_IF_ERROR(ReadJsonField(j, "dropout", kWanVaeSource, &c.dropout));
  RETURN_IF_ERROR(ReadJsonField(j, "latents_mean", kWanVaeSource, &c.latents_mean));
  RETURN_IF_ERROR(ReadJsonField(j, "latents_std", kWanVaeSource, &c.latents_std));
  RETURN_IF_ERROR(ReadJsonField(j, "is_residual", kWanVaeSource, &c.is_residual));
  RETURN_IF_ERROR(ReadJsonField(j, "in_channels", kWanVaeSource, &c.in_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "out_channels", kWanVaeSource, &c.out_channels));
  int64_t patch = 0;
  RETURN_IF_ERROR(ReadJsonField(j, "patch_size", kWanVaeSource, &patch, &found));
  if (found) c.patch_size = patch;
  RETURN_IF_ERROR(ReadJsonField(j, "scale_factor_temporal", kWanVaeSource, &c.scale_factor_temporal));
  RETURN_IF_ERROR(ReadJsonField(j, "scale_factor_spatial", kWanVaeSource, &c.scale_factor_spatial));
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<WanVaeConfig> LoadWanVaeConfig(const std::string& config_json_path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(config_json_path));
  auto config = ParseWanVaeConfig(text);
  if (!config.ok()) return Annotate(config.status(), config_json_path);
  return config;
}

std::string WanVaeConfigToJson(const WanVaeConfig& c) {
  nlohmann::ordered_json j;
  j["_class_name"] = kClassName;
  j["attn_scales"] = c.attn_scales;
  j["base_dim"] = c.base_dim;
  j["decoder_base_dim"] = c.decoder_base_dim ? nlohmann::ordered_json(*c.decoder_base_dim) : nullptr;
  j["dim_mult"] = c.dim_mult;
  j["dropout"] = c.dropout;
  j["in_channels"] = c.in_channels;
  j["is_residual"] = c.is_residual;
  j["latents_mean"] = c.latents_mean;
  j["latents_std"] = c.latents_std;
  j["num_res_blocks"] = c.num_res_blocks;
  j["out_channels"] = c.out_channels;
  j["patch_size"] = c.patch_size ? nlohmann::ordered_json(*c.patch_size) : nullptr;
  j["scale_factor_spatial"] = c.scale_factor_spatial;
  j["scale_factor_temporal"] = c.scale_factor_temporal;
  j["temperal_downsample"] = c.temperal_downsample;
  j["z_dim"] = c.z_dim;
  return j.dump(2);
}

absl::StatusOr<std::string> ReadConfigClassName(const std::string& config_json_path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(config_json_path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(config_json_path, ": not a JSON object"));
  std::string name;
  RETURN_IF_ERROR(ReadJsonField(j, "_class_name", config_json_path, &name));
  return name;
}

bool IsWanVaeEncoderKey(const std::string& name) {
  return absl::StartsWith(name, "encoder.") || absl::StartsWith(name, "quant_conv.");
}

WanVaeConfig TinyWanVaeConfig() {
  WanVaeConfig c;
  c.base_dim = 8;
  c.z_dim = 4;
  c.dim_mult = {1, 2, 2, 2};
  c.num_res_blocks = 1;
  c.latents_mean = {-0.5, 0.25, 0.1, 1.0};
  c.latents_std = {2.0, 0.5, 1.5, 1.25};
  return c;
}

absl::StatusOr<std::string> WanVaeFolder(const std::string& vae_or_pipeline_dir, bool floating_dtype,
                                         const std::string& dtype_name) {
  if (!floating_dtype)
    return absl::InvalidArgumentError(absl::StrCat("Wan VAE dtype must be floating, got ", dtype_name));
  if (!PathExists(JoinPath(vae_or_pipeline_dir, "config.json")) &&
      PathExists(JoinPath(vae_or_pipeline_dir, "vae/config.json"))) {
    return JoinPath(vae_or_pipeline_dir, "vae");
  }
  return vae_or_pipeline_dir;
}

}  // namespace baton
