#include "core/model/wan_config.h"

#include <absl/strings/str_cat.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr absl::string_view kWanConfigSource = "Wan config";

int64_t LinearParams(int64_t in, int64_t out) { return in * out + out; }

absl::Status ReadPatchSize(const nlohmann::json& j, WanConfig* c) {
  std::vector<int64_t> patch;
  bool found = false;
  RETURN_IF_ERROR(ReadJsonField(j, "patch_size", kWanConfigSource, &patch, &found));
  if (!found) return absl::OkStatus();
  if (patch.size() != 3) return absl::InvalidArgumentError("Wan config: patch_size must have 3 entries (t, h, w)");
  c->patch_size = {patch[0], patch[1], patch[2]};
  return absl::OkStatus();
}

absl::StatusOr<WanConfig> ParseDiffusers(const nlohmann::json& j) {
  WanConfig c;
  RETURN_IF_ERROR(ReadPatchSize(j, &c));
  RETURN_IF_ERROR(ReadJsonField(j, "num_attention_heads", kWanConfigSource, &c.num_attention_heads));
  RETURN_IF_ERROR(ReadJsonField(j, "attention_head_dim", kWanConfigSource, &c.attention_head_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "in_channels", kWanConfigSource, &c.in_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "out_channels", kWanConfigSource, &c.out_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "text_dim", kWanConfigSource, &c.text_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "freq_dim", kWanConfigSource, &c.freq_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "ffn_dim", kWanConfigSource, &c.ffn_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "num_layers", kWanConfigSource, &c.num_layers));
  RETURN_IF_ERROR(ReadJsonField(j, "cross_attn_norm", kWanConfigSource, &c.cross_attn_norm));
  RETURN_IF_ERROR(ReadJsonField(j, "qk_norm", kWanConfigSource, &c.qk_norm));
  RETURN_IF_ERROR(ReadJsonField(j, "eps", kWanConfigSource, &c.eps));
  RETURN_IF_ERROR(ReadJsonField(j, "image_dim", kWanConfigSource, &c.image_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "added_kv_proj_dim", kWanConfigSource, &c.added_kv_proj_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "rope_max_seq_len", kWanConfigSource, &c.rope_max_seq_len));
  RETURN_IF_ERROR(ReadJsonField(j, "pos_embed_seq_len", kWanConfigSource, &c.pos_embed_seq_len));
  return c;
}

// The original Wan config (Wan-AI repositories' config.json, `_class_name` WanModel). Head dim is 128 in every
// released model; the CLIP image branch of model_type i2v/flf2v is Wan 2.1's (Wan 2.2 I2V has none: the
// checkpoint opener drops it when the weights hold no img_emb).
absl::StatusOr<WanConfig> ParseOriginal(const nlohmann::json& j) {
  WanConfig c;
  int64_t dim = 0, num_heads = 0;
  std::string model_type = "t2v";
  RETURN_IF_ERROR(ReadPatchSize(j, &c));
  RETURN_IF_ERROR(ReadJsonField(j, "dim", kWanConfigSource, &dim));
  RETURN_IF_ERROR(ReadJsonField(j, "num_heads", kWanConfigSource, &num_heads));
  RETURN_IF_ERROR(ReadJsonField(j, "ffn_dim", kWanConfigSource, &c.ffn_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "freq_dim", kWanConfigSource, &c.freq_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "text_dim", kWanConfigSource, &c.text_dim));
  RETURN_IF_ERROR(ReadJsonField(j, "in_dim", kWanConfigSource, &c.in_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "out_dim", kWanConfigSource, &c.out_channels));
  RETURN_IF_ERROR(ReadJsonField(j, "num_layers", kWanConfigSource, &c.num_layers));
  RETURN_IF_ERROR(ReadJsonField(j, "eps", kWanConfigSource, &c.eps));
  RETURN_IF_ERROR(ReadJsonField(j, "cross_attn_norm", kWanConfigSource, &c.cross_attn_norm));
  RETURN_IF_ERROR(ReadJsonField(j, "model_type", kWanConfigSource, &model_type));
  if (dim <= 0 || num_heads <= 0 || dim % num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Wan config: original config needs dim divisible by num_heads (dim ",
                                                   dim, ", heads ", num_heads, ")"));
  }
  c.num_attention_heads = num_heads;
  c.attention_head_dim = dim / num_heads;
  if (model_type == "i2v" || model_type == "flf2v") {
    c.image_dim = 1280;
    c.added_kv_proj_dim = dim;
    if (model_type == "flf2v") c.pos_embed_seq_len = 2 * 257;
  } else if (model_type != "t2v" && model_type != "ti2v") {
    return absl::InvalidArgumentError(
        absl::StrCat("Wan config: model_type '", model_type, "' is not supported (t2v, i2v, flf2v, ti2v)"));
  }
  return c;
}

}  // namespace

int64_t WanConfig::BlockParams() const {
  const int64_t d = inner_dim();
  int64_t attn = 4 * LinearParams(d, d) + 2 * d;  // q, k, v, out + RMSNorm q, k
  int64_t p = 2 * attn + LinearParams(d, ffn_dim) + LinearParams(ffn_dim, d) + 6 * d;
  if (cross_attn_norm) p += 2 * d;
  if (added_kv_proj_dim > 0) p += 2 * LinearParams(added_kv_proj_dim, d) + d;
  return p;
}

int64_t WanConfig::BlockLinearParams() const {
  const int64_t d = inner_dim();
  int64_t p = 8 * d * d + 2 * d * ffn_dim;
  if (added_kv_proj_dim > 0) p += 2 * added_kv_proj_dim * d;
  return p;
}

int64_t WanConfig::EmbedderParams() const { return in_channels * patch_volume() * inner_dim() + inner_dim(); }

int64_t WanConfig::HeadParams() const {
  return LinearParams(inner_dim(), out_dim() * patch_volume()) + 2 * inner_dim();
}

int64_t WanConfig::ShellParams() const {
  const int64_t d = inner_dim();
  int64_t p = LinearParams(freq_dim, d) + LinearParams(d, d) + LinearParams(d, 6 * d);  // time
  p += LinearParams(text_dim, d) + LinearParams(d, d);                                  // text
  if (image_dim > 0) {
    p += 2 * image_dim + LinearParams(image_dim, image_dim) + LinearParams(image_dim, d) + 2 * d;
    p += pos_embed_seq_len * image_dim;
  }
  return p;
}

int64_t WanConfig::TotalParams() const {
  return ShellParams() + EmbedderParams() + num_layers * BlockParams() + HeadParams();
}

absl::Status WanConfig::Validate() const {
  for (int64_t p : patch_size) {
    if (p <= 0) return absl::InvalidArgumentError("Wan config: patch_size entries must be positive");
  }
  if (num_attention_heads <= 0 || attention_head_dim <= 0 || in_channels <= 0 || out_channels < 0 || text_dim <= 0 ||
      freq_dim <= 0 || freq_dim % 2 != 0 || ffn_dim <= 0 || num_layers <= 0 || rope_max_seq_len <= 0 || image_dim < 0 ||
      added_kv_proj_dim < 0 || pos_embed_seq_len < 0) {
    return absl::InvalidArgumentError("Wan config has a non-positive size (or an odd freq_dim)");
  }
  if (rope_h_dim() % 2 != 0 || rope_t_dim() % 2 != 0 || rope_h_dim() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wan config: attention_head_dim ", attention_head_dim, " gives odd or empty RoPE axes"));
  }
  if (qk_norm != "rms_norm_across_heads") {
    return absl::InvalidArgumentError(absl::StrCat("Wan config: qk_norm '", qk_norm,
                                                   "' is not supported (diffusers' WanAttention always applies "
                                                   "rms_norm_across_heads)"));
  }
  if ((added_kv_proj_dim > 0) != (image_dim > 0)) {
    return absl::InvalidArgumentError("Wan config: image_dim and added_kv_proj_dim go together (Wan 2.1 I2V)");
  }
  return absl::OkStatus();
}

absl::StatusOr<WanConfig> ParseWanConfig(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("config is not a JSON object");
  const bool original = j.contains("dim") && j.contains("num_heads") && !j.contains("num_attention_heads");
  ASSIGN_OR_RETURN(WanConfig c, original ? ParseOriginal(j) : ParseDiffusers(j));
  RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<WanConfig> LoadWanConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigJsonBytes));
  auto config = ParseWanConfig(text);
  if (!config.ok()) return Annotate(config.status(), path);
  return config;
}

std::string WanConfigToJson(const WanConfig& c) {
  nlohmann::ordered_json j;
  auto optional = [](int64_t v) { return v > 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  j["_class_name"] = "WanTransformer3DModel";
  j["patch_size"] = std::vector<int64_t>(c.patch_size.begin(), c.patch_size.end());
  j["num_attention_heads"] = c.num_attention_heads;
  j["attention_head_dim"] = c.attention_head_dim;
  j["in_channels"] = c.in_channels;
  j["out_channels"] = optional(c.out_channels);
  j["text_dim"] = c.text_dim;
  j["freq_dim"] = c.freq_dim;
  j["ffn_dim"] = c.ffn_dim;
  j["num_layers"] = c.num_layers;
  j["cross_attn_norm"] = c.cross_attn_norm;
  j["qk_norm"] = c.qk_norm;
  j["eps"] = c.eps;
  j["image_dim"] = optional(c.image_dim);
  j["added_kv_proj_dim"] = optional(c.added_kv_proj_dim);
  j["rope_max_seq_len"] = c.rope_max_seq_len;
  j["pos_embed_seq_len"] = optional(c.pos_embed_seq_len);
  return j.dump(2) + "\n";
}

}  // namespace baton
