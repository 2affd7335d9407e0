#include "core/keys/wan_keys.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

#include <utility>
#include <vector>

namespace baton {
namespace {

// (original, diffusers) module paths. Block entries are relative to "blocks.N."; the rest are global.
const std::vector<std::pair<std::string, std::string>>& BlockTable() {
  static const auto* table = new std::vector<std::pair<std::string, std::string>>{
      {"self_attn.q", "attn1.to_q"},
      {"self_attn.k", "attn1.to_k"},
      {"self_attn.v", "attn1.to_v"},
      {"self_attn.o", "attn1.to_out.0"},
      {"self_attn.norm_q", "attn1.norm_q"},
      {"self_attn.norm_k", "attn1.norm_k"},
      {"cross_attn.q", "attn2.to_q"},
      {"cross_attn.k", "attn2.to_k"},
      {"cross_attn.v", "attn2.to_v"},
      {"cross_attn.o", "attn2.to_out.0"},
      {"cross_attn.norm_q", "attn2.norm_q"},
      {"cross_attn.norm_k", "attn2.norm_k"},
      {"cross_attn.k_img", "attn2.add_k_proj"},
      {"cross_attn.v_img", "attn2.add_v_proj"},
      {"cross_attn.norm_k_img", "attn2.norm_added_k"},
      {"norm3", "norm2"},
      {"ffn.0", "ffn.net.0.proj"},
      {"ffn.2", "ffn.net.2"},
      {"modulation", "scale_shift_table"},
  };
  return *table;
}

const std::vector<std::pair<std::string, std::string>>& GlobalTable() {
  static const auto* table = new std::vector<std::pair<std::string, std::string>>{
      {"patch_embedding", "patch_embedding"},
      {"text_embedding.0", "condition_embedder.text_embedder.linear_1"},
      {"text_embedding.2", "condition_embedder.text_embedder.linear_2"},
      {"time_embedding.0", "condition_embedder.time_embedder.linear_1"},
      {"time_embedding.2", "condition_embedder.time_embedder.linear_2"},
      {"time_projection.1", "condition_embedder.time_proj"},
      {"img_emb.proj.0", "condition_embedder.image_embedder.norm1"},
      {"img_emb.proj.1", "condition_embedder.image_embedder.ff.net.0.proj"},
      {"img_emb.proj.3", "condition_embedder.image_embedder.ff.net.2"},
      {"img_emb.proj.4", "condition_embedder.image_embedder.norm2"},
      {"img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed"},
      {"head.head", "proj_out"},
      {"head.modulation", "scale_shift_table"},
  };
  return *table;
}

// Maps `name` through `table` (from column `from` to the other): the module path must equal an entry or be
// followed by ".weight"/".bias"-style suffix.
std::optional<std::string> MapName(const std::string& name,
                                   const std::vector<std::pair<std::string, std::string>>& table, bool to_diffusers) {
  for (const auto& [orig, diff] : table) {
    const std::string& from = to_diffusers ? orig : diff;
    const std::string& to = to_diffusers ? diff : orig;
    if (name == from) return to;
    if (absl::StartsWith(name, from + ".")) return absl::StrCat(to, name.substr(from.size()));
  }
  return std::nullopt;
}

// Splits "blocks.N.rest" into ("blocks.N.", "rest"); false for other names.
bool SplitBlock(const std::string& name, std::string* prefix, std::string* rest) {
  if (!absl::StartsWith(name, "blocks.")) return false;
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos || dot == 7) return false;
  *prefix = name.substr(0, dot + 1);
  *rest = name.substr(dot + 1);
  return true;
}

std::optional<std::string> Map(const std::string& name, bool to_diffusers) {
  std::string prefix, rest;
  if (SplitBlock(name, &prefix, &rest)) {
    auto mapped = MapName(rest, BlockTable(), to_diffusers);
    if (!mapped) return std::nullopt;
    return prefix + *mapped;
  }
  return MapName(name, GlobalTable(), to_diffusers);
}

}  // namespace

std::string StripWanOriginalPrefix(const std::string& name) {
  absl::string_view n = name;
  if (!absl::ConsumePrefix(&n, "model.diffusion_model.")) absl::ConsumePrefix(&n, "diffusion_model.");
  return std::string(n);
}

std::optional<std::string> WanDiffusersToOriginal(const std::string& diffusers_name) {
  return Map(diffusers_name, /*to_diffusers=*/false);
}

std::optional<std::string> WanOriginalToDiffusers(const std::string& original_name) {
  return Map(StripWanOriginalPrefix(original_name), /*to_diffusers=*/true);
}

}  // namespace baton
