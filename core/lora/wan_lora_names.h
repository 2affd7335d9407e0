// Wan 2.x LoRA state dicts between the two namings users meet (diffusers/PEFT and original/ComfyUI), as pure
// functions on {key → tensor} maps. The module table follows diffusers' scripts/convert_wan_to_diffusers.py and
// its LoRA converter (loaders/lora_conversion_utils.py::_convert_non_diffusers_wan_lora_to_diffusers).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace baton {

// Module names (no prefix, no ".lora_A.weight"): "blocks.3.attn2.add_k_proj" ↔ "blocks.3.cross_attn.k_img".
// nullopt for a module that is not a Wan linear a LoRA may target.
std::optional<std::string> WanDiffusersToOriginalModule(absl::string_view module);
std::optional<std::string> WanOriginalToDiffusersModule(absl::string_view module);
// A diffusers module name with its dots as underscores (LyCORIS: "blocks_3_attn2_add_k_proj") → the name.
std::optional<std::string> WanModuleFromUnderscored(absl::string_view module);
// kohya/musubi's dots-to-underscores name ("blocks_3_cross_attn_k_img", without "lora_unet_") → original name.
std::optional<std::string> WanKohyaToOriginalModule(absl::string_view module);

// The namings:
//   diffusers/PEFT: "transformer.blocks.N.attn1.to_q.lora_A.weight" / ".lora_B.weight" (also without the
//                   "transformer." prefix, as Baton's internal PEFT names and transformer.save_lora_adapter are)
//   original/ComfyUI: "diffusion_model.blocks.N.self_attn.q.lora_A.weight" / ".lora_B.weight", the names of the
//                   original Wan checkpoints, as ai-toolkit, DiffSynth and ComfyUI write them
// Reading also takes kohya/musubi files ("lora_unet_blocks_0_self_attn_q.lora_down.weight", ".lora_up.weight",
// ".alpha") and original-naming files with lora_down/lora_up or ".alpha". Every output has alpha/rank folded into
// lora_B and no ".alpha": diffusers' Wan converter and ComfyUI then apply it with scale 1, which is what it means.
enum class WanLoraNaming { kDiffusers, kOriginal, kKohya };

// Which naming a file's keys are in (the first key's prefix decides; mixed files are an error).
absl::StatusOr<WanLoraNaming> DetectWanLoraNaming(const std::vector<std::string>& keys);
// True when the keys name Wan modules (blocks.N.attn1/attn2/ffn or self_attn/cross_attn in any naming): how
// `baton lora-convert` tells Wan from FLUX.2.
bool LooksLikeWanLora(const std::vector<std::string>& keys);

// One adapter, module name in the naming of the map that holds it; scale is what the file asks (alpha/rank, 1
// when alpha is folded in already).
struct WanLoraAdapter {
  at::Tensor A;  // [r, in]
  at::Tensor B;  // [out, r]
  double scale = 1.0;
};

// Parses a state dict in any of the three namings into adapters keyed by *diffusers* module name, scale from
// ".alpha" / rank (1 without). PEFT metadata is the caller's (LoadLoraFile reads it for diffusers files).
// Unknown keys, unknown modules and half adapters are errors that name them.
absl::StatusOr<std::map<std::string, WanLoraAdapter>> ParseWanLora(const std::map<std::string, at::Tensor>& sd);

// Writes adapters (diffusers module names) as a state dict, scale folded into lora_B, fp32:
//   WanLoraToDiffusersStateDict: "transformer.<module>.lora_A.weight"
//   WanLoraToOriginalStateDict:  "diffusion_model.<original module>.lora_A.weight"
absl::StatusOr<std::map<std::string, at::Tensor>> WanLoraToDiffusersStateDict(
    const std::map<std::string, WanLoraAdapter>& adapters);
absl::StatusOr<std::map<std::string, at::Tensor>> WanLoraToOriginalStateDict(
    const std::map<std::string, WanLoraAdapter>& adapters);

}  // namespace baton
