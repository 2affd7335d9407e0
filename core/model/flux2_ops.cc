#include "core/model/flux2_ops.h"

#include <torch/version.h>

#include <cmath>

namespace baton {

at::Tensor TimestepFeatures(const at::Tensor& t, int64_t channels) {
  const int64_t half = channels / 2;
  at::Tensor exponent = at::arange(0, half, at::TensorOptions().dtype(at::kFloat).device(t.device())) *
                        (-std::log(10000.0) / static_cast<double>(half));
  at::Tensor args = t.to(at::kFloat).unsqueeze(1) * at::exp(exponent).unsqueeze(0);
  return at::cat({at::cos(args), at::sin(args)}, -1);
}

std::pair<at::Tensor, at::Tensor> RopeTables(const at::Tensor& ids, const std::vector<int64_t>& axes_dims,
                                             double theta) {
  at::Tensor pos = ids.to(at::kFloat);
  std::vector<at::Tensor> coss, sins;
  for (size_t i = 0; i < axes_dims.size(); ++i) {
    const int64_t dim = axes_dims[i];
    auto f64 = at::TensorOptions().dtype(at::kDouble).device(ids.device());
    at::Tensor freqs = 1.0 / at::pow(theta, at::arange(0, dim, 2, f64) / static_cast<double>(dim));
    at::Tensor angles = at::outer(pos.select(1, static_cast<int64_t>(i)).to(at::kDouble), freqs);  // [S, dim/2]
    // Each frequency twice, interleaved: an expand, not repeat_interleave (which reads its output size back from a
    // device).
    auto twice = [](const at::Tensor& t) { return t.unsqueeze(2).expand({t.size(0), t.size(1), 2}).flatten(1); };
    coss.push_back(twice(at::cos(angles)).to(at::kFloat));
    sins.push_back(twice(at::sin(angles)).to(at::kFloat));
  }
  return {at::cat(coss, -1), at::cat(sins, -1)};
}

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // Each interleaved pair (a, b) turns into (a·c - b·s, b·c + a·s): one complex multiply per pair, which is one
  // kernel forward and one backward instead of the stack/negate/two-multiply/add chain of the real form.
  const at::ScalarType compute = at::promote_types(x.scalar_type(), at::kFloat);
  const int64_t dh = x.size(-1);
  at::Tensor rotation = at::complex(cos.slice(1, 0, dh, 2).to(compute), sin.slice(1, 0, dh, 2).to(compute));
  auto sizes = x.sizes().vec();
  sizes.back() = dh / 2;
  sizes.push_back(2);
  at::Tensor pairs = at::view_as_complex(x.to(compute).reshape(sizes));  // [B, S, H, Dh/2] complex
  at::Tensor out = at::view_as_real(pairs * rotation.unsqueeze(0).unsqueeze(2)).flatten(-2);
  return out.to(x.scalar_type());
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // at::rms_norm is one fused kernel each way (torch.nn.RMSNorm, which diffusers uses, calls the same).
  const at::ScalarType compute = at::promote_types(x.scalar_type(), at::kFloat);
  return at::rms_norm(x.to(compute), {x.size(-1)}, weight.to(compute), eps).to(x.scalar_type());
}

at::Tensor LayerNormNoAffine(const at::Tensor& x, double eps) { return at::layer_norm(x, {x.size(-1)}, {}, {}, eps); }

at::Tensor ModulatedLayerNorm(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift, double eps) {
  const int64_t d = x.size(-1);
  // One sample: (1 + scale, shift) are plain per-feature vectors, i.e. LayerNorm's own affine, fused into its
  // kernel (forward and backward). Several samples have several vectors, which LayerNorm cannot take.
  if (x.size(0) == 1 && scale.numel() == d && shift.numel() == d) {
    return at::layer_norm(x, {d}, (scale.reshape({d}) + 1).to(x.scalar_type()), shift.reshape({d}).to(x.scalar_type()),
                          eps);
  }
  return at::addcmul(shift, LayerNormNoAffine(x, eps), 1 + scale);
}

at::Tensor SwiGlu(const at::Tensor& x) {
  auto halves = x.chunk(2, -1);
  return at::silu(halves[0]) * halves[1];
}

at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2), vt = v.transpose(1, 2);  // [B, H, S, Dh]
  at::Tensor out = at::scaled_dot_product_attention(qt, kt, vt);
  return out.transpose(1, 2).flatten(2, 3);
}

std::vector<at::Tensor> SplitModulation(const at::Tensor& mod, int64_t n) { return mod.unsqueeze(1).chunk(n, -1); }

at::Tensor ImagePositionIds(int64_t h, int64_t w) {
  at::Tensor rows = at::arange(h, at::kLong).repeat_interleave(w);
  at::Tensor cols = at::arange(w, at::kLong).repeat({h});
  at::Tensor zeros = at::zeros({h * w}, at::kLong);
  return at::stack({zeros, rows, cols, zeros}, 1);
}

at::Tensor TextPositionIds(int64_t length) {
  at::Tensor zeros = at::zeros({length}, at::kLong);
  return at::stack({zeros, zeros, zeros, at::arange(length, at::kLong)}, 1);
}

at::Tensor ReferencePositionIds(const std::vector<std::pair<int64_t, int64_t>>& grids) {
  std::vector<at::Tensor> parts;
  for (size_t k = 0; k < grids.size(); ++k) {
    at::Tensor ids = ImagePositionIds(grids[k].first, grids[k].second);
    ids.select(1, 0).fill_(10 + 10 * static_cast<int64_t>(k));
    parts.push_back(ids);
  }
  return parts.empty() ? at::zeros({0, 4}, at::kLong) : at::cat(parts, 0);
}

int64_t TargetTokens(const at::Tensor& img_ids) {
  const at::Tensor is_target = img_ids.select(-1, 0).to(at::kCPU) == 0;
  const int64_t n = is_target.sum().item<int64_t>();
  if (n == img_ids.size(0)) return 0;
  TORCH_CHECK(n > 0, "FLUX.2 image ids: no token has time 0 (the target's); reference tokens follow the target's");
  TORCH_CHECK(is_target.slice(0, 0, n).all().item<bool>(),
              "FLUX.2 image ids: a reference token (time != 0) comes before a target token; references follow the "
              "target as Flux2Pipeline orders them");
  return n;
}

}  // namespace baton
