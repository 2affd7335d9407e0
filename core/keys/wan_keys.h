// Wan 2.x parameter names: diffusers' WanTransformer3DModel <-> the original Wan / DiffSynth / ComfyUI names
// (diffusers' scripts/convert_wan_to_diffusers.py TRANSFORMER_KEYS_RENAME_DICT). Note the norm swap: original
// `norm3` (the affine LayerNorm before cross-attention) is diffusers' `norm2`.
#pragma once

#include <optional>
#include <string>

namespace baton {

// "blocks.3.attn1.to_q.weight" -> "blocks.3.self_attn.q.weight"; nullopt for a name with no original form.
std::optional<std::string> WanDiffusersToOriginal(const std::string& diffusers_name);
// The inverse; a leading "model.diffusion_model." or "diffusion_model." is stripped first.
std::optional<std::string> WanOriginalToDiffusers(const std::string& original_name);
// Strips "model.diffusion_model." / "diffusion_model." (ComfyUI single files).
std::string StripWanOriginalPrefix(const std::string& name);

}  // namespace baton
