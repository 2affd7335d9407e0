#include "core/lora/lora_convert.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

#include <map>
#include <string>
#include <vector>

#include "core/lora/adapter_file.h"
#include "core/lora/lora.h"
#include "core/lora/original_adapters.h"
#include "core/lora/wan_lora_names.h"
#include "core/tensor/safetensors.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

absl::StatusOr<std::map<std::string, at::Tensor>> ReadAll(const SafetensorsFile& file) {
  std::map<std::string, at::Tensor> out;
  for (const auto& key : file.Keys()) {
    ASSIGN_OR_RETURN(out[key], file.Load(key, at::kFloat));
  }
  return out;
}

// Wan adapters by diffusers module name. Diffusers files go through LoadLoraFile, which honours PEFT's metadata
// (lora_alpha, alpha_pattern, rsLoRA); the other namings carry their scale in ".alpha" or nowhere.
absl::StatusOr<std::map<std::string, WanLoraAdapter>> ReadWanLora(const std::string& path, const SafetensorsFile& file,
                                                                  WanLoraNaming naming) {
  ASSIGN_OR_RETURN(auto raw, ReadAll(file));
  ASSIGN_OR_RETURN(auto adapters, ParseWanLora(raw));  // checks every key names a Wan module
  if (naming != WanLoraNaming::kDiffusers) return adapters;
  ASSIGN_OR_RETURN(auto weights, LoadLoraFile(path));
  for (auto& [module, w] : weights) {
    auto it = adapters.find(module);
    if (it == adapters.end()) return absl::InternalError(absl::StrCat("module ", module, " read twice differently"));
    it->second.scale = w.scale;
  }
  return adapters;
}

absl::StatusOr<std::string> ConvertWan(const std::string& in, const std::string& out, const std::string& to,
                                       const SafetensorsFile& file) {
  ASSIGN_OR_RETURN(WanLoraNaming naming, DetectWanLoraNaming(file.Keys()));
  ASSIGN_OR_RETURN(auto adapters, ReadWanLora(in, file, naming));
  std::map<std::string, at::Tensor> sd;
  if (to == "original") {
    ASSIGN_OR_RETURN(sd, WanLoraToOriginalStateDict(adapters));
  } else {
    ASSIGN_OR_RETURN(sd, WanLoraToDiffusersStateDict(adapters));
  }
  static const char* kNamingNames[] = {"diffusers", "original", "kohya"};
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  RETURN_IF_ERROR(WriteSafetensors(out, sd, metadata));
  return absl::StrCat(adapters.size(), " Wan LoRA adapters in ", to, " naming (read ",
                      kNamingNames[static_cast<int>(naming)], " naming)");
}

// The spec of a diffusers/PEFT file for lora or dora adapters: one rank (the file's metadata has one r), alpha = r
// (scale 1: each adapter's own scale is folded into B).
absl::StatusOr<LoraSpec> OneRankSpec(const std::string& in, const std::map<std::string, LoraWeights>& weights,
                                     AdapterType type) {
  LoraSpec spec;
  spec.type = type;
  spec.rank = weights.begin()->second.A.size(0);
  spec.alpha = static_cast<double>(spec.rank);
  for (const auto& [module, w] : weights) {
    if (w.A.size(0) != spec.rank) {
      return absl::InvalidArgumentError(absl::StrCat(in, ": adapters of different ranks (", module, " has ",
                                                     w.A.size(0), ", others ", spec.rank, ") cannot be converted"));
    }
  }
  return spec;
}

// FLUX.2 through the existing readers/writers.
absl::StatusOr<std::string> ConvertFlux2(const std::string& in, const std::string& out, const std::string& to) {
  ASSIGN_OR_RETURN(auto weights, LoadLoraFile(in));
  if (weights.empty()) return absl::InvalidArgumentError(absl::StrCat(in, ": no LoRA adapters"));
  ASSIGN_OR_RETURN(const LoraSpec spec, OneRankSpec(in, weights, AdapterType::kLora));
  auto params = LoraWeightsToParameters(weights, 1.0);
  RETURN_IF_ERROR(to == "original" ? SaveLoraBfl(out, params, spec) : SaveLoraDiffusers(out, params, spec));
  return absl::StrCat(weights.size(), " FLUX.2 LoRA adapters in ", to == "original" ? "BFL/original" : "diffusers",
                      " naming");
}

// A LyCORIS file's adapters renamed to the modules of the family whose names they all carry.
absl::StatusOr<const OriginalNaming*> ResolveLycorisFamily(const std::string& in,
                                                           std::map<std::string, LoraWeights>& weights) {
  for (const OriginalNaming* naming : {&Flux2OriginalNaming(), &WanOriginalNaming()}) {
    std::map<std::string, LoraWeights> renamed;
    for (const auto& [name, w] : weights) {
      auto module = naming->from_underscored(std::string(absl::StripPrefix(name, "lycoris_")));
      if (!module) break;
      renamed[*module] = w;
    }
    if (renamed.size() == weights.size()) {
      weights = std::move(renamed);
      return naming;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(in, ": LyCORIS modules that name no FLUX.2 or Wan Linear (", weights.begin()->first, ", ...)"));
}

// DoRA, LoHa and LoKr files, any naming (diffusers/PEFT, LyCORIS, original), into `to`: the original naming, or
// Baton's own (diffusers/PEFT for dora, LyCORIS for loha and lokr).
absl::StatusOr<std::string> ConvertVariants(const std::string& in, const std::string& out, const std::string& to,
                                            const std::vector<std::string>& keys) {
  ASSIGN_OR_RETURN(auto weights, LoadLoraFile(in));
  if (weights.empty()) return absl::InvalidArgumentError(absl::StrCat(in, ": no adapters"));
  const OriginalNaming* naming = LooksLikeWanLora(keys) ? &WanOriginalNaming() : &Flux2OriginalNaming();
  if (absl::StartsWith(keys.front(), "lycoris_")) {
    ASSIGN_OR_RETURN(naming, ResolveLycorisFamily(in, weights));
  }
  const AdapterType type = weights.begin()->second.type;
  for (const auto& [module, w] : weights) {
    if (w.type != type) {
      return absl::InvalidArgumentError(absl::StrCat(in, ": adapters of two types (", module, " is ",
                                                     AdapterTypeName(w.type), ", others ", AdapterTypeName(type), ")"));
    }
  }
  const char* family = naming == &WanOriginalNaming() ? "Wan" : "FLUX.2";
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"baton_lora_type", AdapterTypeName(type)}};
  std::string wrote = "original (ComfyUI)";
  if (to == "original") {
    ASSIGN_OR_RETURN(auto sd, AdaptersToOriginal(weights, *naming));
    RETURN_IF_ERROR(WriteSafetensors(out, sd, meta));
  } else if (type == AdapterType::kLoha || type == AdapterType::kLokr) {
    RETURN_IF_ERROR(SaveLycorisAdapters(out, weights, meta));
    wrote = "LyCORIS";
  } else {
    ASSIGN_OR_RETURN(const LoraSpec spec, OneRankSpec(in, weights, type));
    RETURN_IF_ERROR(SaveLoraDiffusers(out, LoraWeightsToParameters(weights, 1.0), spec, meta));
    wrote = "diffusers/PEFT";
  }
  return absl::StrCat(weights.size(), " ", family, " ", AdapterDisplayName(type), " adapters in ", wrote, " naming");
}

}  // namespace

absl::StatusOr<std::string> ConvertLoraFile(const std::string& in, const std::string& out, const std::string& to) {
  if (to != "diffusers" && to != "original") {
    return absl::InvalidArgumentError(absl::StrCat("the naming must be diffusers or original, not '", to, "'"));
  }
  ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(in));
  if (!DirName(out).empty()) RETURN_IF_ERROR(MakeDirs(DirName(out)));
  const std::vector<std::string> keys = file->Keys();
  absl::StatusOr<std::string> done = HasAdapterVariantKeys(keys) ? ConvertVariants(in, out, to, keys)
                                     : LooksLikeWanLora(keys)    ? ConvertWan(in, out, to, *file)
                                                                 : ConvertFlux2(in, out, to);
  if (!done.ok()) return Annotate(done.status(), in);
  return done;
}

}  // namespace baton
