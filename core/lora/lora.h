// LoRA adapters on the FLUX.2 transformer: choosing target Linears by diffusers name, attaching adapters,
// collecting/assigning their weights, and the two file formats users load (diffusers/PEFT and BFL/ComfyUI,
// described at LoraWeights).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/lora/adapter_type.h"

namespace baton {

struct LoraSpec {
  int64_t rank = 16;
  double alpha = 16.0;
  std::vector<std::string> targets;  // diffusers module-name suffixes, e.g. "to_q", "to_out.0", "attn.to_out"
  double dropout = 0.0;
  uint64_t seed = 0;  // adapter init; each module's A is drawn from (seed, module name)
  // The adapters' math: fp32 (as stored), or the compute dtype (bf16: tensor cores, as PEFT's adapters cast to the
  // base dtype). The adapters themselves stay fp32 either way (the optimizer's masters); see LoraLinearImpl.
  at::ScalarType dtype = at::kFloat;
  AdapterType type = AdapterType::kLora;  // lora | dora | loha | lokr (adapter_type.h)
  int64_t lokr_factor = -1;               // LoKr's decompose_factor: -1 near √dim, else must divide in and out
};

// "attention" | "all-linear" | a comma-separated list of target names.
absl::StatusOr<std::vector<std::string>> ResolveLoraTargets(const std::string& preset_or_list);

// True when module `name` (full diffusers module path) is selected by `targets`: only Linears inside
// transformer_blocks / single_transformer_blocks (FLUX.2) or blocks (Wan) match suffix targets; x_embedder,
// context_embedder and proj_out match only when named exactly.
bool LoraTargetMatches(const std::string& name, const std::vector<std::string>& targets);

// Attaches adapters to every matching LoraLinear under `root`; returns how many. Errors if none match.
absl::StatusOr<int> AttachLora(torch::nn::Module& root, const LoraSpec& spec);

// The adapter tensors by PEFT name without prefix ("transformer_blocks.0.attn.to_q.lora_A.weight"),
// sorted by name (the order used for gradient sums, clipping and the wire).
std::map<std::string, at::Tensor> LoraParameters(torch::nn::Module& root);
// Their gradients (zeros where a parameter has no grad yet), same names.
std::map<std::string, at::Tensor> LoraGradients(torch::nn::Module& root);
void ZeroLoraGradients(torch::nn::Module& root);
// Copies `values` into the adapters (same names, shapes); every adapter must be present.
absl::Status AssignLoraParameters(torch::nn::Module& root, const std::map<std::string, at::Tensor>& values);
// Sets the dropout seed on every adapter (per micro-batch, so recompute sees the same masks).
void SetLoraDropoutSeed(torch::nn::Module& root, uint64_t seed);

// The file formats:
//   diffusers/PEFT: "transformer.<module>.lora_A.weight" [r, in] / ".lora_B.weight" [out, r] with alpha/r folded
//                   into B, header metadata {"format": "pt", "lora_adapter_metadata": {"transformer.r": r,
//                   "transformer.lora_alpha": r, ...}} (files from peft with lora_alpha ≠ r load too)
//   BFL/ComfyUI:    "diffusion_model.<BFL module>.lora_A.weight" / ".lora_B.weight" with alpha/r folded into B
//                   (no ".alpha": diffusers' converter rejects it; files that have one still load), the img/txt
//                   q,k,v adapters fused into one qkv adapter (A stacked, B block-diagonal: exact, rank 3r);
//                   DoRA, LoHa and LoKr in the same naming: original_adapters.h.

// One adapter as stored in a file, keyed by diffusers module name.
struct LoraWeights {
  at::Tensor A;        // [r, in] (lora, dora)
  at::Tensor B;        // [out, r] (lora, dora)
  double scale = 1.0;  // alpha / r
  AdapterType type = AdapterType::kLora;
  // The other parameters by PEFT name after the module: DoRA's "lora_magnitude_vector"; every factor of LoHa and
  // LoKr ("hada_w1_a", ..., "lokr_w1", ...).
  std::map<std::string, at::Tensor> other;
};

// Saves adapters (PEFT names → tensors, as from LoraParameters) in diffusers/PEFT format (alpha/r folded into B).
absl::Status SaveLoraDiffusers(const std::string& path, const std::map<std::string, at::Tensor>& params,
                               const LoraSpec& spec, const std::map<std::string, std::string>& extra_metadata = {});
// The BFL/ComfyUI tensors of adapters by PEFT name (diffusion_model. prefix, fused qkv, `scale` folded into lora_B).
absl::StatusOr<std::map<std::string, at::Tensor>> LoraTensorsBfl(const std::map<std::string, at::Tensor>& params,
                                                                 double scale = 1.0);
// The header metadata every LoRA file gets (format, rank, alpha, targets, ...) plus `extra`.
std::map<std::string, std::string> LoraFileMetadata(const LoraSpec& spec,
                                                    const std::map<std::string, std::string>& extra);
// Saves in BFL/ComfyUI format (diffusion_model. prefix, fused qkv, alpha/r folded into lora_B).
absl::Status SaveLoraBfl(const std::string& path, const std::map<std::string, at::Tensor>& params, const LoraSpec& spec,
                         const std::map<std::string, std::string>& extra_metadata = {});

// Loads either format (detected from the keys) into diffusers module names. Fused BFL qkv adapters are split
// exactly when B is block-diagonal, else as diffusers does (A shared, B chunked in three). The scale is PEFT's
// (lora_adapter_metadata: lora_alpha, alpha_pattern, use_rslora; keys with or without the "transformer."
// prefix), a BFL ".alpha" / rank, or 1 when the file has neither (alpha folded in).
absl::StatusOr<std::map<std::string, LoraWeights>> LoadLoraFile(const std::string& path);

// Attaches one adapter per loaded module (its own rank) with scale `w.scale * multiplier` and copies the
// weights in (inference: `baton forward --lora`). Errors list modules the model lacks and misfit shapes.
absl::StatusOr<int> AttachLoraWeights(torch::nn::Module& root, const std::map<std::string, LoraWeights>& weights,
                                      double multiplier = 1.0);

// Converts loaded adapters to PEFT parameter names for AssignLoraParameters; the scale must equal each
// attached adapter's scale (alpha/r), else it is folded into B.
std::map<std::string, at::Tensor> LoraWeightsToParameters(const std::map<std::string, LoraWeights>& weights,
                                                          double target_scale);

}  // namespace baton
