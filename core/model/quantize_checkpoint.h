// `baton quantize`: a FLUX.2 checkpoint (any source Flux2Checkpoint opens) rewritten as a pre-quantized
// diffusers-layout folder: config.json + diffusion_pytorch_model.safetensors (or shards + index), the blocks'
// Linear weights as `<name>.weight` I8 | F8_E4M3 with `<name>.weight_scale` F32 [out] (core/quant/stored_quant.h),
// every other tensor as stored, __metadata__ {"baton_quantize": "int8" | "fp8"}.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <functional>
#include <string>

#include "core/model/flux2_weights.h"
#include "core/quant/weight_quant.h"

namespace baton {

struct QuantizeCheckpointOptions {
  WeightQuant quant = WeightQuant::kInt8;  // kInt8 | kFp8
  // Shard size limit: < 0 shards like the input (the size of its largest file; one file if it has one),
  // 0 writes one file, > 0 that many bytes at most per shard (a larger tensor gets a shard of its own).
  int64_t max_shard_bytes = -1;
  std::function<void(const std::string&)> progress;  // one line per finished block; may be empty
};

// Design goals: streaming — one source tensor is in memory at a time, each is written as soon as it is
// quantized (the header is planned from shapes first), so a 64 GB model needs ~one tensor of RAM; readable
// block by block — tensors are laid out embedders/head first, then block after block, so a stage's range
// is a few contiguous runs of a shard; memory-mappable — inside a file, tensors are ordered by element size
// (4, 2, 1 bytes) so every tensor starts aligned to its element size; crash-safe — each shard is written to a
// temporary file and renamed.
// Writes the quantized folder `out_dir` (created). Refuses kNone, and a source pre-quantized as the other
// kind (re-quantizing 8-bit weights would compound the error: quantize the full-precision source instead).
absl::Status WriteQuantizedFlux2Checkpoint(const Flux2Checkpoint& checkpoint, const std::string& out_dir,
                                           const QuantizeCheckpointOptions& options);

}  // namespace baton
