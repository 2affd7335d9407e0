#include "core/lora/wan_lora_names.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_replace.h>
#include <absl/strings/str_split.h>

#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include "core/tensor/shape.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Inside blocks.N: diffusers suffix ↔ original suffix (every Linear of a Wan block; norms and the modulation table
// are not LoRA targets).
constexpr std::pair<const char*, const char*> kBlockModules[] = {
    {"attn1.to_q", "self_attn.q"},
    {"attn1.to_k", "self_attn.k"},
    {"attn1.to_v", "self_attn.v"},
    {"attn1.to_out.0", "self_attn.o"},
    {"attn2.to_q", "cross_attn.q"},
    {"attn2.to_k", "cross_attn.k"},
    {"attn2.to_v", "cross_attn.v"},
    {"attn2.to_out.0", "cross_attn.o"},
    {"attn2.add_k_proj", "cross_attn.k_img"},
    {"attn2.add_v_proj", "cross_attn.v_img"},
    {"ffn.net.0.proj", "ffn.0"},
    {"ffn.net.2", "ffn.2"},
};

// Outside the blocks (patch_embedding is a Conv3d: its adapter keeps its name and its conv shapes).
constexpr std::pair<const char*, const char*> kGlobalModules[] = {
    {"condition_embedder.text_embedder.linear_1", "text_embedding.0"},
    {"condition_embedder.text_embedder.linear_2", "text_embedding.2"},
    {"condition_embedder.time_embedder.linear_1", "time_embedding.0"},
    {"condition_embedder.time_embedder.linear_2", "time_embedding.2"},
    {"condition_embedder.time_proj", "time_projection.1"},
    {"condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.1"},
    {"condition_embedder.image_embedder.ff.net.2", "img_emb.proj.3"},
    {"proj_out", "head.head"},
    {"patch_embedding", "patch_embedding"},
};

constexpr char kDiffusersPrefix[] = "transformer.";
constexpr char kOriginalPrefix[] = "diffusion_model.";
constexpr char kKohyaPrefix[] = "lora_unet_";

// "blocks.12.attn1.to_q" → {"12", "attn1.to_q"}; nullopt when not inside a block.
std::optional<std::pair<std::string, std::string>> SplitBlock(absl::string_view module, char sep) {
  const std::string head = absl::StrCat("blocks", std::string(1, sep));
  if (!absl::ConsumePrefix(&module, head)) return std::nullopt;
  size_t end = module.find(sep);
  int index;
  if (end == absl::string_view::npos || !absl::SimpleAtoi(module.substr(0, end), &index) || index < 0) {
    return std::nullopt;
  }
  return std::make_pair(std::string(module.substr(0, end)), std::string(module.substr(end + 1)));
}

// Looks `module` up in column `from` of the tables and returns column `to`.
std::optional<std::string> MapModule(absl::string_view module, bool from_diffusers) {
  auto pick = [&](const std::pair<const char*, const char*>& row, bool source) {
    return source == from_diffusers ? row.first : row.second;
  };
  if (auto block = SplitBlock(module, '.')) {
    for (const auto& row : kBlockModules) {
      if (block->second == pick(row, true)) return absl::StrCat("blocks.", block->first, ".", pick(row, false));
    }
    return std::nullopt;
  }
  for (const auto& row : kGlobalModules) {
    if (module == pick(row, true)) return std::string(pick(row, false));
  }
  return std::nullopt;
}

std::string Underscored(absl::string_view s) { return absl::StrReplaceAll(s, {{".", "_"}}); }

// A dots-to-underscores name → the table's name in the diffusers (or original) column. Underscores are ambiguous
// ("self_attn_q"), so each known name is compared underscored.
std::optional<std::string> FromUnderscored(absl::string_view module, bool diffusers) {
  auto pick = [&](const std::pair<const char*, const char*>& row) { return diffusers ? row.first : row.second; };
  if (auto block = SplitBlock(module, '_')) {
    for (const auto& row : kBlockModules) {
      if (block->second == Underscored(pick(row))) return absl::StrCat("blocks.", block->first, ".", pick(row));
    }
    return std::nullopt;
  }
  for (const auto& row : kGlobalModules) {
    if (module == Underscored(pick(row))) return std::string(pick(row));
  }
  return std::nullopt;
}

// A key split into naming-free module and part ("A", "B" or "alpha").
struct KeyParts {
  std::string module;
  std::string part;
};

std::optional<KeyParts> SplitKey(absl::string_view key) {
  static constexpr std::pair<const char*, const char*> kSuffixes[] = {{".lora_A.weight", "A"},
                                                                      {".lora_B.weight", "B"},
                                                                      {".lora_down.weight", "A"},
                                                                      {".lora_up.weight", "B"},
                                                                      {".alpha", "alpha"}};
  for (const auto& [suffix, part] : kSuffixes) {
    if (absl::EndsWith(key, suffix)) {
      return KeyParts{std::string(key.substr(0, key.size() - strlen(suffix))), part};
    }
  }
  return std::nullopt;
}

// A key's diffusers module name under `naming`, or nullopt.
std::optional<std::string> DiffusersModuleOf(absl::string_view module, WanLoraNaming naming) {
  switch (naming) {
    case WanLoraNaming::kDiffusers:
      absl::ConsumePrefix(&module, kDiffusersPrefix);
      return WanDiffusersToOriginalModule(module) ? std::optional<std::string>(std::string(module)) : std::nullopt;
    case WanLoraNaming::kOriginal:
      if (!absl::ConsumePrefix(&module, kOriginalPrefix)) return std::nullopt;
      return WanOriginalToDiffusersModule(module);
    case WanLoraNaming::kKohya: {
      if (!absl::ConsumePrefix(&module, kKohyaPrefix)) return std::nullopt;
      auto original = WanKohyaToOriginalModule(module);
      return original ? WanOriginalToDiffusersModule(*original) : std::nullopt;
    }
  }
  return std::nullopt;
}

WanLoraNaming NamingOfKey(absl::string_view key) {
  if (absl::StartsWith(key, kOriginalPrefix)) return WanLoraNaming::kOriginal;
  if (absl::StartsWith(key, kKohyaPrefix)) return WanLoraNaming::kKohya;
  return WanLoraNaming::kDiffusers;
}

absl::Status CheckShapes(const std::string& module, const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() >= 2 && b.dim() >= 2 && a.size(0) >= 1 && b.size(1) == a.size(0)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("Wan LoRA module ", module, " has lora_A ", ShapeString(a.sizes()),
                                                 " and lora_B ", ShapeString(b.sizes()),
                                                 " (want [r, in...] and [out, r...], r >= 1)"));
}

absl::StatusOr<double> AlphaScale(const std::string& module, const at::Tensor& alpha, int64_t rank) {
  const double value = alpha.numel() == 1 ? alpha.item<double>() : std::nan("");
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wan LoRA module ", module, ".alpha must be one finite number (", alpha.numel(), " values)"));
  }
  return value / static_cast<double>(rank);
}

}  // namespace

std::optional<std::string> WanDiffusersToOriginalModule(absl::string_view module) { return MapModule(module, true); }

std::optional<std::string> WanOriginalToDiffusersModule(absl::string_view module) { return MapModule(module, false); }

std::optional<std::string> WanModuleFromUnderscored(absl::string_view module) { return FromUnderscored(module, true); }

std::optional<std::string> WanKohyaToOriginalModule(absl::string_view module) { return FromUnderscored(module, false); }

absl::StatusOr<WanLoraNaming> DetectWanLoraNaming(const std::vector<std::string>& keys) {
  if (keys.empty()) return absl::InvalidArgumentError("the LoRA file has no tensors");
  const WanLoraNaming naming = NamingOfKey(keys.front());
  for (const auto& key : keys) {
    if (NamingOfKey(key) != naming) {
      return absl::InvalidArgumentError(absl::StrCat("LoRA keys mix namings: '", keys.front(), "' and '", key, "'"));
    }
  }
  return naming;
}

bool LooksLikeWanLora(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    for (const char* marker : {".attn1.", ".attn2.", ".self_attn.", ".cross_attn.", "_self_attn_", "_cross_attn_",
                               ".ffn.net.", ".ffn.0.", ".ffn.2.", "condition_embedder.", "head.head."}) {
      if (absl::StrContains(key, marker)) return true;
    }
  }
  return false;
}

absl::StatusOr<std::map<std::string, WanLoraAdapter>> ParseWanLora(const std::map<std::string, at::Tensor>& sd) {
  std::vector<std::string> keys;
  for (const auto& [key, t] : sd) keys.push_back(key);
  ASSIGN_OR_RETURN(WanLoraNaming naming, DetectWanLoraNaming(keys));
  std::map<std::string, std::map<std::string, at::Tensor>> parts;  // diffusers module → {A, B, alpha}
  std::vector<std::string> unknown;
  for (const auto& [key, t] : sd) {
    auto split = SplitKey(key);
    auto module = split ? DiffusersModuleOf(split->module, naming) : std::nullopt;
    if (!module) {
      unknown.push_back(key);
      continue;
    }
    if (parts[*module].count(split->part)) {
      return absl::InvalidArgumentError(absl::StrCat("Wan LoRA key ", key, " repeats module ", *module));
    }
    parts[*module][split->part] = t;
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Wan LoRA keys name no Wan module: ", absl::StrJoin(unknown, ", ")));
  }
  std::map<std::string, WanLoraAdapter> out;
  for (auto& [module, p] : parts) {
    if (!p.count("A") || !p.count("B")) {
      return absl::InvalidArgumentError(absl::StrCat("Wan LoRA module ", module, " lacks lora_A or lora_B"));
    }
    WanLoraAdapter adapter{p["A"].to(at::kFloat), p["B"].to(at::kFloat), 1.0};
    RETURN_IF_ERROR(CheckShapes(module, adapter.A, adapter.B));
    if (p.count("alpha")) {
      ASSIGN_OR_RETURN(adapter.scale, AlphaScale(module, p["alpha"], adapter.A.size(0)));
    }
    out[module] = adapter;
  }
  return out;
}

namespace {

absl::StatusOr<std::map<std::string, at::Tensor>> WriteAdapters(const std::map<std::string, WanLoraAdapter>& adapters,
                                                                bool original) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [module, adapter] : adapters) {
    auto original_name = WanDiffusersToOriginalModule(module);
    if (!original_name) return absl::InvalidArgumentError(absl::StrCat("not a Wan LoRA module: ", module));
    RETURN_IF_ERROR(CheckShapes(module, adapter.A, adapter.B));
    const std::string base =
        original ? absl::StrCat(kOriginalPrefix, *original_name) : absl::StrCat(kDiffusersPrefix, module);
    at::Tensor b = adapter.B.detach().to(at::kFloat).cpu();
    out[base + ".lora_A.weight"] = adapter.A.detach().to(at::kFloat).cpu().contiguous();
    out[base + ".lora_B.weight"] = (adapter.scale == 1.0 ? b : b * adapter.scale).contiguous();
  }
  return out;
}

}  // namespace

absl::StatusOr<std::map<std::string, at::Tensor>> WanLoraToDiffusersStateDict(
    const std::map<std::string, WanLoraAdapter>& adapters) {
  return WriteAdapters(adapters, false);
}

absl::StatusOr<std::map<std::string, at::Tensor>> WanLoraToOriginalStateDict(
    const std::map<std::string, WanLoraAdapter>& adapters) {
  return WriteAdapters(adapters, true);
}

}  // namespace baton
