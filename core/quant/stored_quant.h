// How 8-bit weights look on disk, for the checkpoint reader: Baton's own `baton quantize` layout and ComfyUI's
// two (LoadEightBitWeight lists them); all store a weight `<layer>.weight` in 8 bits next to an fp32 scale, and
// dequantize as w = q · scale.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <optional>
#include <string>
#include <vector>

#include "core/tensor/safetensors.h"

namespace baton {

inline constexpr char kBatonQuantizeMetadataKey[] = "baton_quantize";

// True for keys that only describe another tensor's quantization (scales, markers, per-layer format
// records); the model has no parameter of that name.
bool IsQuantSideKey(const std::string& key);

// True when a stored dtype code is an 8-bit weight format ("I8", "F8_E4M3", "F8_E5M2").
bool IsEightBitDtype(const std::string& safetensors_code);

// The keys that may hold the scale of an 8-bit `weight_key` ("x.weight" → "x.weight_scale", "x.scale_weight").
std::vector<std::string> ScaleKeyCandidates(const std::string& weight_key);

// The layouts read:
//   baton quantize   `<layer>.weight` I8 | F8_E4M3 [out, in] + `<layer>.weight_scale` F32 [out] (per row),
//                    __metadata__ {"baton_quantize": "int8" | "fp8"}.
//   ComfyUI mixed    `<layer>.weight` F8_E4M3 + `<layer>.weight_scale` F32 scalar (per tensor), optional
//   precision        `<layer>.input_scale` and `<layer>.comfy_quant` (U8 bytes of JSON {"format": ...}),
//                    __metadata__ `_quantization_metadata` (ComfyUI's QUANTIZATION.md, comfy/quant_ops.py).
//   ComfyUI legacy   marker tensor `scaled_fp8`; `<layer>.weight` F8_E4M3 + `<layer>.scale_weight` F32 scalar,
//   "scaled fp8"     optional `<layer>.scale_input` (comfy/ops.py scaled_fp8_ops).
// A per-tensor scale is a per-row scale repeated. Input (activation) scales are ignored: activations stay in
// the compute dtype. Block-wise scales (ComfyUI int8_blockwise) and 4-bit formats are refused by name.
// Loads an 8-bit weight from `file` with its scale `scale_key` from `scale_file` (the same file, or another
// shard) expanded to one fp32 value per row: data [out, in] in its stored 8-bit dtype, scale [out]. Refuses
// (InvalidArgument, naming key and file) F8_E5M2, a scale that is neither per-tensor ([] or [1]) nor per-row
// ([out]), and a ComfyUI `comfy_quant` record whose format is not float8_e4m3fn.
absl::StatusOr<std::pair<at::Tensor, at::Tensor>> LoadEightBitWeight(const SafetensorsFile& file,
                                                                     const std::string& weight_key,
                                                                     const SafetensorsFile& scale_file,
                                                                     const std::string& scale_key);

}  // namespace baton
