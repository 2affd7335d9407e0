#include "core/lora/adapter_math.h"

#include <vector>

namespace baton {

at::Tensor LohaDeltaWeight(const at::Tensor& w1a, const at::Tensor& w1b, const at::Tensor& w2a, const at::Tensor& w2b,
                           double scale) {
  return at::matmul(w1a, w1b) * at::matmul(w2a, w2b) * scale;
}

at::Tensor LokrDelta(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2, double scale) {
  std::vector<int64_t> split(x.sizes().begin(), x.sizes().end() - 1);
  split.push_back(w1.size(1));
  split.push_back(w2.size(1));
  at::Tensor y = at::matmul(at::matmul(w1, x.reshape(split)), w2.t());  // [..., out_l, out_k]
  std::vector<int64_t> flat(x.sizes().begin(), x.sizes().end() - 1);
  flat.push_back(w1.size(0) * w2.size(0));
  return y.reshape(flat) * scale;
}

at::Tensor DoraOutput(const at::Tensor& base, const at::Tensor& base_dropped, const at::Tensor& x_dropped,
                      const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, const at::Tensor& magnitude,
                      double scale) {
  const at::Tensor lora_weight = at::matmul(b, a).detach();
  const at::Tensor norm = at::linalg_vector_norm(w + scale * lora_weight, 2, {1}).detach();
  const at::Tensor mag_norm_scale = (magnitude / norm).view({1, -1});
  const at::Tensor lora_result = at::matmul(at::matmul(x_dropped, a.t()), b.t());
  return base + ((mag_norm_scale - 1) * base_dropped + mag_norm_scale * lora_result * scale);
}

at::Tensor DoraInitialMagnitude(const at::Tensor& w) { return at::linalg_vector_norm(w.to(at::kFloat), 2, {1}); }

}  // namespace baton
