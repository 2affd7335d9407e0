// Where a text encoder's layer tensors come from. At full precision every tensor is streamed from the memory-mapped
// checkpoint in the compute dtype on each call (one layer at a time). With an 8-bit `quantize` (int8 | fp8, per
// output channel, as core/quant stores the transformer's blocks) the Linear weights are quantized the first time
// their layer runs, one tensor at a time from fp32, and stay resident in 8 bits; the rest (norms, biases,
// umT5's relative-position tables: a tiny share) is still streamed. Not thread-safe (one encoder, one call).
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/quant/quantize_tensor.h"
#include "core/quant/weight_quant.h"
#include "core/text/text_encoder_checkpoint.h"

namespace baton {

// One tensor of a layer: `full` in the compute dtype, or (an 8-bit Linear weight) `eight_bit`.
struct TextWeight {
  at::Tensor full;            // as stored in the spec's shape, compute dtype; undefined when eight_bit holds it
  QuantizedWeight eight_bit;  // data [out, in] int8 | float8_e4m3fn, scale [out] fp32; undefined at full precision
};

// x [..., in] · wᵀ + bias → [..., out] in x's dtype, for either form (core/quant/eight_bit_linear.h for 8 bits).
at::Tensor TextLinear(const at::Tensor& x, const TextWeight& w, const at::Tensor& bias = at::Tensor());

// True for a tensor `quantize` stores in 8 bits: a 2-D `.weight` other than an embedding or umT5's
// relative_attention_bias (those are tables, not Linears).
bool IsTextEncoderLinearWeight(const TextEncoderTensorSpec& spec);

class TextWeights {
 public:
  // `checkpoint` must outlive this object. `device`: where the 8-bit copies live.
  TextWeights(const TextEncoderCheckpoint* checkpoint, WeightQuant quant, at::Device device)
      : checkpoint_(checkpoint), quant_(quant), device_(device) {}

  WeightQuant quant() const { return quant_; }

  // `specs`' tensors in order, on the device; full-precision ones in `dtype`. Errors name the key and file.
  absl::StatusOr<std::vector<TextWeight>> Load(const std::vector<TextEncoderTensorSpec>& specs, at::ScalarType dtype);

  // Bytes of the resident 8-bit weights (data and scales) quantized so far.
  int64_t resident_bytes() const { return resident_bytes_; }

 private:
  absl::StatusOr<QuantizedWeight> Resident(const TextEncoderTensorSpec& spec);

  const TextEncoderCheckpoint* const checkpoint_;
  const WeightQuant quant_;
  const at::Device device_;
  std::map<std::string, QuantizedWeight> resident_;  // by decoder-relative name
  int64_t resident_bytes_ = 0;
};

}  // namespace baton
