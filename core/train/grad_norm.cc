#include "core/train/grad_norm.h"

#include <cmath>

#include "core/device/readback.h"

namespace baton {

at::Tensor SquaredNorms(const std::vector<at::Tensor>& grads) {
  if (grads.empty()) return at::zeros({0}, at::kDouble);
  at::NoGradGuard no_grad;
  // One foreach reduction for the lot (a handful of kernels on a GPU, not three per adapter), in double.
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2, at::kDouble);
  return at::stack(norms).square_();
}

std::map<std::string, double> SquaredNormsByName(const std::map<std::string, at::Tensor>& grads) {
  std::vector<at::Tensor> list;
  for (const auto& [name, g] : grads) list.push_back(g);
  const at::Tensor host = ReadBack(SquaredNorms(list));
  std::map<std::string, double> out;
  int64_t i = 0;
  for (const auto& [name, g] : grads) out[name] = host[i++].item<double>();
  return out;
}

double GlobalNorm(const std::map<std::string, double>& squared_norms) {
  double sq = 0.0;
  for (const auto& [name, v] : squared_norms) sq += v;
  return std::sqrt(sq);
}

double ClipFactor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

void ScaleGradients(const std::vector<at::Tensor>& grads, double factor) {
  if (factor == 1.0 || grads.empty()) return;
  at::NoGradGuard no_grad;
  at::_foreach_mul_(grads, factor);
}

double ClipGradNorm(std::map<std::string, at::Tensor>& grads, double max_norm) {
  const double norm = GlobalNorm(SquaredNormsByName(grads));
  std::vector<at::Tensor> list;
  for (const auto& [name, g] : grads) list.push_back(g);
  ScaleGradients(list, ClipFactor(norm, max_norm));
  return norm;
}

}  // namespace baton
