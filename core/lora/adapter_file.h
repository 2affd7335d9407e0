// The files of the adapter types beyond plain LoRA (adapter_type.h): DoRA in diffusers/PEFT naming, LoHa and LoKr
// in LyCORIS naming (SaveLycoris says how).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <map>
#include <string>
#include <vector>

#include "core/lora/lora.h"

namespace baton {

// The parameter whose scaling scales the adapter's ΔW linearly: "lora_B.weight" (lora, dora), "hada_w1_a", "lokr_w1".
const char* LinearFactorName(AdapterType type);

// "lycoris_" + module with '.' → '_'.
std::string LycorisModuleName(const std::string& module);

// DoRA's file is plain LoRA's (lora.h) plus "transformer.<module>.lora_magnitude_vector" and "use_dora": true in
// lora_adapter_metadata: what diffusers' load_lora_adapter / peft read.
// Saves LoHa or LoKr adapters (PEFT names → tensors, as from LoraParameters) in LyCORIS naming, as
// SaveLycorisAdapters does (one writer), with "baton_lora_type" in the metadata:
// "lycoris_<module with dots as underscores>.hada_w1_a" (…, ".lokr_w1", ...) and ".alpha" (LycorisAlpha), the scale
// folded into hada_w1_a / lokr_w1: what lycoris-lora's create_lycoris_from_weights reads on a diffusers transformer,
// and the "lycoris_" keys ComfyUI maps for diffusers-named models.
absl::Status SaveLycoris(const std::string& path, const std::map<std::string, at::Tensor>& params, const LoraSpec& spec,
                         const std::map<std::string, std::string>& metadata);

// One LoHa or LoKr adapter from its tensors by LyCORIS name after the module ("hada_w1_a", ..., "alpha"), checked:
// every factor a non-empty matrix, none missing, none Baton's types lack (errors name `path` and `module`).
absl::StatusOr<LoraWeights> LycorisAdapterFromParts(const std::string& path, const std::string& module,
                                                    std::map<std::string, at::Tensor> parts);

// The adapter on the host in fp32 with its scale folded into its linear factor (LinearFactorName), scale 1.
LoraWeights WithScaleFolded(const LoraWeights& w);
// The ".alpha" a LoHa or LoKr gets once its scale is folded in, so that readers apply scale 1: the rank LyCORIS and
// ComfyUI divide it by (hada_w1_b's rows, lokr_w2_a's columns), or 1 for a LoKr with a full w2 (readers apply scale
// 1 there whatever it says; lycoris-lora still needs one).
at::Tensor LycorisAlpha(const LoraWeights& w);
// Saves LoHa and LoKr adapters (diffusers module → weights, any scales) in LyCORIS naming, each scale folded in and
// ".alpha" its LycorisAlpha; adapters may differ in rank (lora-convert).
absl::Status SaveLycorisAdapters(const std::string& path, const std::map<std::string, LoraWeights>& adapters,
                                 const std::map<std::string, std::string>& metadata);

// Whether a file's keys are LyCORIS-named ("lycoris_...").
bool IsLycorisFile(const std::map<std::string, at::Tensor>& raw);
// A LyCORIS file's LoHa and LoKr adapters keyed by their LyCORIS module name (ResolveLycorisNames maps them to the
// model's modules). The scale is ".alpha" / rank (LyCORIS' rule: 1 for a LoKr whose factors are both full).
absl::StatusOr<std::map<std::string, LoraWeights>> LycorisAdapters(const std::string& path,
                                                                   const std::map<std::string, at::Tensor>& raw);
// Renames LyCORIS-keyed adapters to the module among `modules` whose LyCORIS name they carry (other keys pass
// through). Errors name the adapters no module matches.
absl::StatusOr<std::map<std::string, LoraWeights>> ResolveLycorisNames(std::map<std::string, LoraWeights> weights,
                                                                       const std::vector<std::string>& modules);

}  // namespace baton
