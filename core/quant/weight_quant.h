// Which frozen weights are stored in 8 bits, and how many bytes that takes.
// `quantize: none | int8 | fp8` (job key; --quantize on baton forward / plan / quantize): the Linear weights
// inside the transformer blocks are stored as int8 with a per-output-channel symmetric fp32 scale, or as
// float8 e4m3 with a per-output-channel fp32 scale. LoRA adapters, norms, embedders, the modulation shell
// and the head stay in the compute dtype: they are a small share of the bytes and the most sensitive.
#pragma once

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

enum class WeightQuant { kNone, kInt8, kFp8 };

// "none" | "int8" | "fp8"; anything else is InvalidArgument naming the allowed values.
absl::StatusOr<WeightQuant> ParseWeightQuant(absl::string_view text);
std::string WeightQuantName(WeightQuant q);

// True for a frozen FLUX.2 parameter that `quantize` stores in 8 bits: a 2-D Linear weight inside
// transformer_blocks.* or single_transformer_blocks.* (diffusers names). Norm scales (1-D), LoRA tensors,
// embedders, the modulation linears and the head are never quantized.
bool IsQuantizedFlux2Param(absl::string_view diffusers_name, const std::vector<int64_t>& shape);

// Bytes a frozen parameter of `shape` occupies: quantized (1 byte per element + a 4-byte scale per output
// row) when `quantized`, else elements x compute_bytes.
int64_t FrozenParamBytes(const std::vector<int64_t>& shape, bool quantized, int compute_bytes);

// Dequantizing an 8-bit weight to a narrower compute dtype goes through fp32 one tile of rows at a time, each tile
// at most this many bytes (DequantizeWeight): the fp32 temporary of a whole weight (2 GB for FLUX.2-dev's
// to_qkv_mlp_proj) never exists. The planner counts one tile.
constexpr int64_t kDequantTileBytes = int64_t{64} << 20;

}  // namespace baton
