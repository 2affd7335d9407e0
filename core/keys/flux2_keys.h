// Parameter-name mapping between diffusers' Flux2Transformer2DModel and the original BFL checkpoint
// (`flux2-dev.safetensors`): fused img/txt qkv in BFL are three Linears in diffusers, and BFL's final layer
// stores (shift, scale) where diffusers' norm_out stores (scale, shift). Table: reference/models-and-trainers.md A1.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace baton {

// Where a diffusers parameter lives in a BFL file.
struct BflLocation {
  std::string key;           // BFL key, e.g. "double_blocks.3.img_attn.qkv.weight"
  int chunk = 0;             // which of num_chunks equal parts along dim 0
  int num_chunks = 1;        // 3 for fused qkv
  bool swap_halves = false;  // norm_out.linear: halves along dim 0 are swapped
};

// Maps a diffusers parameter name (".weight" suffix included) or module name (no suffix) to BFL.
// Module names map the same way without the ".weight"/".scale" suffix handling (used for LoRA keys).
std::optional<BflLocation> DiffusersToBfl(const std::string& diffusers_key);

// The modules of a double block (after "transformer_blocks.N.") that BFL fuses with others into one Linear: the
// img and txt q, k and v ("attn.to_q", ..., "attn.add_v_proj").
std::vector<std::string> Flux2FusedLeaves();

// The diffusers keys a BFL key expands to (3 for fused qkv), in chunk order.
std::vector<std::string> BflToDiffusers(const std::string& bfl_key);

// Whole-state-dict conversions (fuse/split qkv, swap final-layer halves). Unknown keys are an error
// listing them.
absl::StatusOr<std::map<std::string, at::Tensor>> DiffusersToBflStateDict(
    const std::map<std::string, at::Tensor>& diffusers);
absl::StatusOr<std::map<std::string, at::Tensor>> BflToDiffusersStateDict(const std::map<std::string, at::Tensor>& bfl);

// The diffusers module a LyCORIS/kohya name gives with its dots as underscores ("transformer_blocks_0_attn_to_q" →
// "transformer_blocks.0.attn.to_q"), among the Linears a LoRA may adapt; nullopt for any other name.
std::optional<std::string> Flux2ModuleFromUnderscored(absl::string_view name);

// Swaps the two halves of a tensor along dim 0 ((shift, scale) <-> (scale, shift)).
at::Tensor SwapHalves(const at::Tensor& t);

}  // namespace baton
