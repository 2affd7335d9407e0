#include "core/train/adamw8bit.h"

#include <cmath>
#include <vector>

namespace baton {
namespace {

constexpr int64_t kLutSize = 65536;

// x's elements padded with zeros to whole blocks: [blocks, 256].
at::Tensor InBlocks(const at::Tensor& flat) {
  const int64_t n = flat.numel();
  const int64_t pad = (kQuantBlock - n % kQuantBlock) % kQuantBlock;
  return (pad > 0 ? at::constant_pad_nd(flat, {0, pad}, 0) : flat).view({-1, kQuantBlock});
}

}  // namespace

at::Tensor DynamicCode(bool is_signed) {
  // create_dynamic_map(signed, max_exponent_bits=7, total_bits=8): for exponent i, the midpoints of a float32
  // linspace(0.1, 1) of 2^i + 1 points (2^(i+1) + 1 unsigned) scaled by 10^(i-6); then 0 and 1, sorted.
  std::vector<at::Tensor> parts;
  for (int i = 0; i < 7; ++i) {
    const int64_t items = is_signed ? (int64_t{1} << i) + 1 : (int64_t{1} << (i + 1)) + 1;
    const at::Tensor b = at::linspace(0.1, 1, items, at::kFloat);
    const at::Tensor means = (b.slice(0, 0, items - 1) + b.slice(0, 1, items)) / 2.0;
    const double scale = std::pow(10.0, static_cast<double>(i - 6));
    parts.push_back(means * scale);
    if (is_signed) parts.push_back(means * -scale);
  }
  parts.push_back(at::zeros({1}, at::kFloat));
  parts.push_back(at::ones({1}, at::kFloat));
  return std::get<0>(at::sort(at::cat(parts)));
}

QuantCode QuantCode::Make(bool is_signed, const at::Device& device) {
  const at::Tensor code = DynamicCode(is_signed);
  const float* c = code.data_ptr<float>();
  // bitsandbytes' build_quantize_lut, in the same float arithmetic.
  std::vector<float> mid(255);
  for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (c[i] + c[i + 1]);
  at::Tensor lut = at::empty({kLutSize}, at::kByte);
  uint8_t* out = lut.data_ptr<uint8_t>();
  int64_t k = 0;
  for (int64_t i = 0; i < kLutSize; ++i) {
    const float val = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kLutSize - 1);
    while (k < 255 && mid[k] < val) ++k;
    out[i] = static_cast<uint8_t>(k);
  }
  return {code.to(device), lut.to(device)};
}

void QuantizeBlockwise(const at::Tensor& x, const QuantCode& code, at::Tensor& q, at::Tensor& absmax) {
  const int64_t n = x.numel();
  const at::Tensor blocks = InBlocks(x.reshape(-1));
  const at::Tensor am = blocks.abs().amax(1);
  // bitsandbytes: inv = 1.0f / absmax; index = (uint16)((clamp(v·inv, -1, 1) + 1)·0.5·65535 + 0.5). An all-zero
  // block keeps code 0 and scale 0.
  const at::Tensor zero = am == 0;
  const at::Tensor inv = at::where(zero, at::zeros_like(am), at::reciprocal(am)).unsqueeze(1);
  const at::Tensor v = (blocks * inv).clamp_(-1, 1);
  const at::Tensor index = v.add(1.0).mul_(0.5).mul_(static_cast<double>(kLutSize - 1)).add_(0.5).to(at::kInt);
  at::Tensor codes = code.lut.index_select(0, index.view(-1)).view_as(index).masked_fill_(zero.unsqueeze(1), 0);
  q.copy_(codes.view(-1).slice(0, 0, n).view(x.sizes()));
  absmax.copy_(am);
}

at::Tensor DequantizeBlockwise(const at::Tensor& q, const at::Tensor& absmax, const QuantCode& code) {
  const int64_t n = q.numel();
  const at::Tensor values = InBlocks(code.code.index_select(0, q.reshape(-1).to(at::kInt)));
  return (values * absmax.unsqueeze(1)).view(-1).slice(0, 0, n).view(q.sizes());
}

void AdamW8bitStep(at::Tensor& p, const at::Tensor& g, at::Tensor& q1, at::Tensor& absmax1, at::Tensor& q2,
                   at::Tensor& absmax2, const QuantCode& signed_code, const QuantCode& unsigned_code,
                   const AdamArgs& a) {
  // bitsandbytes' _optimizer_update_8bit_blockwise_cpu, optimizer "adam", op for op.
  at::Tensor m = DequantizeBlockwise(q1, absmax1, signed_code);
  at::Tensor v = DequantizeBlockwise(q2, absmax2, unsigned_code);
  m.mul_(a.beta1).add_(g, 1.0 - a.beta1);
  v.mul_(a.beta2).addcmul_(g, g, 1.0 - a.beta2);
  const double c1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double c2 = std::sqrt(1.0 - std::pow(a.beta2, static_cast<double>(a.step)));
  const at::Tensor denom = (v.sqrt() / c2).add_(a.eps);
  if (a.weight_decay > 0.0) p.mul_(1.0 - a.lr * a.weight_decay);
  p.addcdiv_(m, denom, -a.lr / c1);
  QuantizeBlockwise(m, signed_code, q1, absmax1);
  QuantizeBlockwise(v, unsigned_code, q2, absmax2);
}

void Adam32bitStep(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, const AdamArgs& a) {
  // bitsandbytes' _optimizer_update_32bit_cpu, optimizer "adam" (no max_unorm), op for op.
  m.mul_(a.beta1).add_(g, 1.0 - a.beta1);
  v.mul_(a.beta2).addcmul_(g, g, 1.0 - a.beta2);
  const double c1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double c2 = std::sqrt(1.0 - std::pow(a.beta2, static_cast<double>(a.step)));
  const double step_size = -a.lr * c2 / c1;
  if (a.weight_decay > 0.0) p.mul_(1.0 - a.lr * a.weight_decay);
  const at::Tensor update = m / (v.sqrt() + a.eps * c2);
  p.add_(update, step_size * 1.0);
}

}  // namespace baton
