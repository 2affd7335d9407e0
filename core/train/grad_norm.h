// Global gradient-norm clipping in the pieces a pipeline needs: each gradient's squared norm measured where it lives
// (one device reduction, read back with the step's losses), the global norm added on the host in name order (so one
// process, the coordinator and the stages' own optimizers add them alike), and the factor applied on the device.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

namespace baton {

// Each gradient's squared L2 norm, accumulated in double, as one [n] double tensor on the gradients' device (they
// must share one), in the order given. Nothing is read back.
at::Tensor SquaredNorms(const std::vector<at::Tensor>& grads);
// The same for tensors by name, read back: name → squared norm.
std::map<std::string, double> SquaredNormsByName(const std::map<std::string, at::Tensor>& grads);

// sqrt of the squared norms added in name order.
double GlobalNorm(const std::map<std::string, double>& squared_norms);
// What the gradients are multiplied by: max_norm / (norm + 1e-6) when 0 < max_norm < norm, else 1.
double ClipFactor(double norm, double max_norm);
// Multiplies every gradient by `factor` in place (nothing when it is 1).
void ScaleGradients(const std::vector<at::Tensor>& grads, double factor);

// All of it for tensors by name (one readback): scales `grads` in place so their global L2 norm is at most max_norm
// (no-op when max_norm ≤ 0) and returns the norm before clipping.
double ClipGradNorm(std::map<std::string, at::Tensor>& grads, double max_norm);

}  // namespace baton
