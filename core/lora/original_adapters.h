// Adapters of every type (lora, dora, loha, lokr) in a model's original naming, the one ComfyUI reads: FLUX.2's BFL
// module names or Wan's original ones under "diffusion_model.", each type's tensors as kohya/LyCORIS name them, each
// scale folded into its linear factor. Fused modules (FLUX.2's qkv) hold their parts stacked along the output rows,
// exactly; a LoKr cannot be stacked. The layout is at AdaptersToOriginal; docs/jobs.md `lora.type` says it for users.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/lora/lora.h"

namespace baton {

// Where a diffusers module lives in the original naming.
struct OriginalPlace {
  std::string module;  // "double_blocks.0.img_attn.qkv"
  int chunk = 0;       // which of num_chunks equal parts of the output rows
  int num_chunks = 1;
  bool swap_halves = false;  // the output rows' halves swapped (FLUX.2's norm_out.linear)
};

// One family's module renaming.
struct OriginalNaming {
  std::function<std::optional<OriginalPlace>(const std::string& diffusers_module)> place;
  std::function<std::vector<std::string>(const std::string& original_module)> modules;  // chunk order; {} unknown
  std::function<std::optional<std::string>(const std::string& underscored)> from_underscored;  // LyCORIS names
};
const OriginalNaming& Flux2OriginalNaming();
const OriginalNaming& WanOriginalNaming();

// Adapters by diffusers module → tensors by original-naming key:
//   lora, dora: "<module>.lora_A.weight" [r, in], ".lora_B.weight" [out, r]; dora also ".dora_scale" [out, 1] (the
//               magnitude: the norm is over each output row, as peft's lora_magnitude_vector)
//   loha:       ".hada_w1_a", ".hada_w1_b", ".hada_w2_a", ".hada_w2_b" and ".alpha" = the rank
//   lokr:       ".lokr_w1", ".lokr_w2" or ".lokr_w2_a" / ".lokr_w2_b", and ".alpha" = the rank when w2 is decomposed
//               (1 with a full w2, where readers apply scale 1 anyway)
// Fused modules: lora and dora with A stacked and B block-diagonal (magnitudes stacked), loha with w1_a and w2_a
// block-diagonal and w1_b, w2_b stacked (rank n·r); Kronecker products stacked are not one, so a lokr on a fused
// module is an error. Reading splits fused modules back (block-diagonal parts to their own rank).
absl::StatusOr<std::map<std::string, at::Tensor>> AdaptersToOriginal(const std::map<std::string, LoraWeights>& adapters,
                                                                     const OriginalNaming& naming);
// Tensors by original-naming key (as read from `path`) → adapters by diffusers module. Scales: ".alpha" / rank, 1
// without. Unknown keys and modules, half adapters and misfit shapes are errors naming them.
absl::StatusOr<std::map<std::string, LoraWeights>> AdaptersFromOriginal(const std::string& path,
                                                                        const std::map<std::string, at::Tensor>& raw,
                                                                        const OriginalNaming& naming);

// Adapter parameters by PEFT name (as LoraParameters gives them) grouped by module, each with `scale`; the type told
// from the names (lora_magnitude_vector: dora, hada_*: loha, lokr_*: lokr).
absl::StatusOr<std::map<std::string, LoraWeights>> AdaptersFromParameters(
    const std::map<std::string, at::Tensor>& params, double scale);

// Whether any key is a tensor of a type beyond plain LoRA (dora_scale, lora_magnitude_vector, hada_*, lokr_*).
bool HasAdapterVariantKeys(const std::vector<std::string>& keys);

}  // namespace baton
