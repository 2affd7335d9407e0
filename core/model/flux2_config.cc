#include "core/model/flux2_config.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr absl::string_view kFlux2ConfigSource = "FLUX.2 config";

}  // namespace

int64_t Flux2Config::DoubleBlockParams() const {
  const int64_t d = inner_dim(), m = mlp_hidden_dim(), h = attention_head_dim;
  // Per stream: q,k,v,out (4·D²) + SwiGLU in (D·2M) + out (M·D); plus 4 RMSNorm weights of head_dim.
  return 2 * (4 * d * d + d * 2 * m + m * d) + 4 * h;
}

int64_t Flux2Config::SingleBlockParams() const {
  const int64_t d = inner_dim(), m = mlp_hidden_dim(), h = attention_head_dim;
  return d * (3 * d + 2 * m) + (d + m) * d + 2 * h;
}

int64_t Flux2Config::EmbedderParams() const { return in_channels * inner_dim() + joint_attention_dim * inner_dim(); }

int64_t Flux2Config::HeadParams() const { return inner_dim() * 2 * inner_dim() + inner_dim() * out_dim(); }

int64_t Flux2Config::ShellParams() const {
  const int64_t d = inner_dim();
  int64_t embed = timestep_guidance_channels * d + d * d;
  if (guidance_embeds) embed *= 2;
  return embed + (6 + 6 + 3) * d * d + 2 * d * d;
}

int64_t Flux2Config::TotalParams() const {
  // norm_out.linear counted once (it is in ShellParams and HeadParams).
  return ShellParams() + EmbedderParams() + num_layers * DoubleBlockParams() + num_single_layers * SingleBlockParams() +
         inner_dim() * out_dim();
}

absl::Status Flux2Config::Validate() const {
  if (patch_size <= 0 || in_channels <= 0 || num_layers < 0 || num_single_layers < 0 || attention_head_dim <= 0 ||
      num_attention_heads <= 0 || joint_attention_dim <= 0 || timestep_guidance_channels <= 0 ||
      timestep_guidance_channels % 2 != 0 || mlp_ratio <= 0) {
    return absl::InvalidArgumentError("FLUX.2 config has a non-positive size (or odd timestep_guidance_channels)");
  }
  if (num_blocks() == 0) return absl::InvalidArgumentError("FLUX.2 config has no blocks");
  int64_t sum = 0;
  for (int64_t a : axes_dims_rope) {
    if (a <= 0 || a % 2 != 0) return absl::InvalidArgumentError("axes_dims_rope entries must be positive and even");
    sum += a;
  }
  if (sum != attention_head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("axes_dims_rope sum to ", sum, " but attention_head_dim is ", attention_head_dim));
  }
  return absl::OkStatus();
}

absl::StatusOr<Flux2Config> ParseFlux2Config(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("config is not a JSON object");
  Flux2Config c;
  RETURN_IF_ERROR(ReadJsonField(j, "patch_size", kFlux2ConfigSource, &c.patch_size));
  RETURN_IF_ERROR(ReadJsonField(j, "in_channels", kFlux2ConfigSource, &c.in_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "out_channels", kFlux2ConfigSource, &c.out_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "num_layers", kFlux2ConfigSource, &c.num_layers));
  RETURN_IF_ERROR(ReadJsonField(j, "num_single_layers", kFlux2ConfigSource, &c.num_single_layers));
  RETURN_IF_ERROR(ReadJsonField(j, "attention_head_dim", kFlux2ConfigSource, &c.attention_head_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "num_attention_heads", kFlux2ConfigSource, &c.num_attention_heads));
  RETURN_IF_ERROR(ReadJsonField(j, "joint_attention_dim", kFlux2ConfigSource, &c.joint_attention_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "timestep_guidance_channels", kFlux2ConfigSource, &c.timestep_guidance_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "mlp_ratio", kFlux2ConfigSource, &c.mlp_ratio));
  RETURN_IF_ERROR(ReadJsonField(j, "axes_dims_rope", kFlux2ConfigSource, &c.axes_dims_rope));
  RETURN_IF_ERROR(ReadJsonField(j, "rope_theta", kFlux2ConfigSource, &c.rope_theta));
  RETURN_IF_ERROR(ReadJsonField(j, "eps", kFlux2ConfigSource, &c.eps));
  RETURN_IF_ERROR(ReadJsonField(j, "guidance_embeds", kFlux2ConfigSource, &c.guidance_embeds));
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<Flux2Config> LoadFlux2Config(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigJsonBytes));
  auto config = ParseFlux2Config(text);
  if (!config.ok()) return Annotate(config.status(), path);
  return config;
}

std::string Flux2ConfigToJson(const Flux2Config& c) {
  nlohmann::ordered_json j;
  j["_class_name"] = "Flux2Transformer2DModel";
  j["patch_size"] = c.patch_size;
  j["in_channels"] = c.in_channels;
  if (c.out_channels > 0)
    j["out_channels"] = c.out_channels;
  else
    j["out_channels"] = nullptr;
  j["num_layers"] = c.num_layers;
  j["num_single_layers"] = c.num_single_layers;
  j["attention_head_dim"] = c.attention_head_dim;
  j["num_attention_heads"] = c.num_attention_heads;
  j["joint_attention_dim"] = c.joint_attention_dim;
  j["timestep_guidance_channels"] = c.timestep_guidance_channels;
  j["mlp_ratio"] = c.mlp_ratio;
  j["axes_dims_rope"] = c.axes_dims_rope;
  j["rope_theta"] = c.rope_theta;
  j["eps"] = c.eps;
  j["guidance_embeds"] = c.guidance_embeds;
  return j.dump(2) + "\n";
}

std::string DescribeBlocks(const Flux2Config& config, int64_t block_begin, int64_t block_end) {
  const auto range = [](int64_t a, int64_t b) { return a == b ? absl::StrCat(a) : absl::StrCat(a, "-", b); };
  const int64_t nd = config.num_layers;
  std::vector<std::string> parts;
  if (block_begin < nd) parts.push_back("double " + range(block_begin, std::min(block_end, nd) - 1));
  if (block_end > nd) parts.push_back("single " + range(std::max(block_begin, nd) - nd, block_end - nd - 1));
  return parts.empty() ? "(none)" : absl::StrJoin(parts, ", ");
}

}  // namespace baton
