// How pipeline data is named on the wire (FLUX.2's tensors; other families name theirs in their ModelFamily)
// (stage.proto envelopes). One place for the names, so the coordinator, the stage worker and the tests cannot drift
// apart.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <map>
#include <string>

#include "core/model/flux2_config.h"
#include "core/model/flux2_model.h"
#include "core/model/model_family.h"

namespace baton {

// The wire's family-independent part: CONSTANTS carry the shell's constants plus one empty "rope_key/<key>" tensor
// naming the tables to use; a ROPE envelope carries one key's tables, each as "<table>/<key>". (The names are
// FLUX.2's from before there were families; every family's tables travel under them.)
inline constexpr char kTablesKeyPrefix[] = "rope_key/";
TensorMap ConstantsOnWire(const ShellOutputs& shell);
TensorMap TablesOnWire(const ShellOutputs& shell);

// RoPE tables a stage keeps (FIFO by arrival). The coordinator mirrors this to know what each stage holds.
constexpr size_t kRopeCacheEntries = 32;

// RoPE tables depend only on the token grid and text length (image ids (0,h,w,0), text ids (0,0,0,l)).
std::string RopeKey(int64_t grid_h, int64_t grid_w, int64_t text_len);

// FLUX.2's names, by envelope kind:
//   INPUTS     hidden_states [b, Si, C_in], encoder_hidden_states [b, St, J]            (to stage 0)
//   CONSTANTS  mod_img [b, 6D], mod_txt [b, 6D], mod_single [b, 3D], mod_out [b, 2D],
//              rope_key/<key> (empty tensor naming the RoPE table to use)              (to every stage)
//              target_tokens [] int64, only with reference images (Flux2Constants)
//   ROPE       rope_cos/<key>, rope_sin/<key> [St+Si, Dh] fp32                         (once per stage and key)
//   TARGET     target [b, Si, C_out]                                                    (to the last stage)
//   ACTIVATION img [b, Si, D] + txt [b, St, D]  |  joint [b, St+Si, D] + txt_len []     (stage k → k+1)
//   GRADIENT   the same names as the activation it answers                             (stage k+1 → k)
TensorMap ActivationTensors(const Flux2Activations& a);
// Validates names, ranks, hidden size D, dtype and batch agreement; errors say what was wrong.
absl::StatusOr<Flux2Activations> ActivationsFromTensors(const TensorMap& t, const Flux2Config& c, at::ScalarType dtype);
// Gradients of a stage's input activation, by the same names (img/txt or joint).
TensorMap InputGradientTensors(const Flux2Activations& input);

TensorMap ConstantTensors(const Flux2Constants& k, const std::string& rope_key);
TensorMap RopeTensors(const Flux2Constants& k, const std::string& rope_key);
// Splits a CONSTANTS bundle into the modulations (validated against D) and the RoPE key it names.
absl::StatusOr<std::pair<Flux2Constants, std::string>> ConstantsFromTensors(const TensorMap& t, const Flux2Config& c);

// Stage-0 inputs.
TensorMap InputTensors(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states);
absl::StatusOr<Flux2Activations> InputsFromTensors(const TensorMap& t, const Flux2Config& c, at::ScalarType dtype);

}  // namespace baton
