// 8-bit AdamW: bitsandbytes' AdamW8bit (blockwise, block 256), its CPU implementation operation for operation. Each
// moment is kept as one byte per element -- an index into a 256-entry "dynamic" code (signed for the first moment,
// unsigned for the second) -- with one fp32 scale per block of 256 (its largest magnitude): 2.03 bytes of state per
// parameter instead of 8. A step dequantizes both moments, runs Adam in fp32, and quantizes them again. Tensors with
// fewer than min_8bit_size elements keep fp32 moments and take bitsandbytes' 32-bit Adam (its own formula).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace baton {

inline constexpr int64_t kQuantBlock = 256;

// bitsandbytes' create_dynamic_map(signed): 256 sorted fp32 values in [-1, 1] ([0, 1] unsigned), dense near 0.
at::Tensor DynamicCode(bool is_signed);

// A code with what quantizing to it needs: the code on the device and its lookup table (bitsandbytes' CPU quantizer
// reads the code index of a normalized value from a table of 65536 equal bins over [-1, 1], each the code entry
// nearest the bin's left edge).
struct QuantCode {
  at::Tensor code;  // [256] fp32
  at::Tensor lut;   // [65536] uint8 code indices
  static QuantCode Make(bool is_signed, const at::Device& device);
};

// x (fp32, any shape) as codes `q` (uint8, x's shape) and per-block scales `absmax` ([ceil(n / 256)] fp32), in place.
void QuantizeBlockwise(const at::Tensor& x, const QuantCode& code, at::Tensor& q, at::Tensor& absmax);
// The fp32 values (q's shape) that q and absmax stand for.
at::Tensor DequantizeBlockwise(const at::Tensor& q, const at::Tensor& absmax, const QuantCode& code);

struct AdamArgs {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 0;  // 1-based
};
// bitsandbytes' 8-bit blockwise Adam step of p (fp32, in place) from g: the moments (q1, absmax1) with the signed
// code and (q2, absmax2) with the unsigned one, requantized in place.
void AdamW8bitStep(at::Tensor& p, const at::Tensor& g, at::Tensor& q1, at::Tensor& absmax1, at::Tensor& q2,
                   at::Tensor& absmax2, const QuantCode& signed_code, const QuantCode& unsigned_code,
                   const AdamArgs& a);
// bitsandbytes' 32-bit Adam step (a tensor under min_8bit_size): fp32 moments m and v, in place.
void Adam32bitStep(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, const AdamArgs& a);

}  // namespace baton
