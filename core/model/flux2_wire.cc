// Flux2Family::CheckWire: what a FLUX.2 stage accepts from the wire (stage_io.h names the tensors). The messages
// carry no envelope context: the stage worker prefixes the kind, step and micro-batch.
#include <absl/strings/str_cat.h>

#include "core/model/flux2_family.h"
#include "core/model/stage_io.h"
#include "core/tensor/shape.h"
#include "core/util/status.h"

namespace baton {
namespace {

absl::Status CheckInputs(const TensorMap& t, const Flux2Config& c) {
  // The coordinator's inputs are converted to the compute dtype on use: any floating dtype is fine here (and
  // checking in the tensor's own dtype copies nothing).
  absl::Status s = InputsFromTensors(t, c, t.empty() ? at::kFloat : t.begin()->second.scalar_type()).status();
  if (s.ok() && t.size() != 2) s = absl::InvalidArgumentError("inputs: unexpected extra tensors");
  for (const auto& [name, x] : t) {
    if (s.ok() && !x.is_floating_point())
      s = absl::InvalidArgumentError(absl::StrCat("inputs: '", name, "' is not floating"));
  }
  return s;
}

absl::Status CheckConstants(const TensorMap& t, const Flux2Config& c) {
  for (const auto& [name, x] : t) {
    (void)x;
    if (name.find('/') != std::string::npos) return absl::InvalidArgumentError("constants: unexpected extra tensors");
  }
  TensorMap keyed = t;
  keyed["rope_key/k"] = at::empty({0});  // ConstantsFromTensors wants the wire's key entry
  return ConstantsFromTensors(keyed, c).status();
}

absl::Status CheckTables(const TensorMap& t) {
  if (t.size() != 2 || !t.count("rope_cos") || !t.count("rope_sin")) {
    return absl::InvalidArgumentError("expected exactly rope_cos/<key> and rope_sin/<key> with the same key");
  }
  const at::Tensor& cos = t.at("rope_cos");
  const at::Tensor& sin = t.at("rope_sin");
  if (cos.dim() != 2 || cos.scalar_type() != at::kFloat || cos.sizes() != sin.sizes() ||
      sin.scalar_type() != at::kFloat) {
    return absl::InvalidArgumentError(absl::StrCat("tables are ", ShapeString(cos.sizes()), " and ",
                                                   ShapeString(sin.sizes()), ", expected two equal fp32 [S, Dh]"));
  }
  return absl::OkStatus();
}

// "target" [b, Si, out], and the records' masks "loss_mask" [b, Si, 1] when some record has one.
absl::Status CheckTarget(const TensorMap& t, const Flux2Config& c) {
  auto mask = t.find("loss_mask");
  if (!t.count("target") || t.size() != (mask == t.end() ? 1u : 2u)) {
    return absl::InvalidArgumentError("expected 'target' and at most 'loss_mask'");
  }
  const at::Tensor& target = t.at("target");
  if (target.dim() != 3 || target.size(2) != c.out_dim() || !target.is_floating_point()) {
    return absl::InvalidArgumentError(absl::StrCat("'target' is ", c10::toString(target.scalar_type()), " ",
                                                   ShapeString(target.sizes()), ", expected floating [b, Si, ",
                                                   c.out_dim(), "]"));
  }
  if (mask == t.end()) return absl::OkStatus();
  const at::Tensor& m = mask->second;
  if (m.dim() != 3 || m.size(0) != target.size(0) || m.size(1) != target.size(1) || m.size(2) != 1 ||
      !m.is_floating_point()) {
    return absl::InvalidArgumentError(absl::StrCat("'loss_mask' is ", ShapeString(m.sizes()), ", expected floating [",
                                                   target.size(0), ", ", target.size(1), ", 1]"));
  }
  return absl::OkStatus();
}

// GRADIENT answers an ACTIVATION: img + txt, or joint (txt_len is an integer and gets none).
absl::Status CheckGradient(const TensorMap& t, const Flux2Config& c) {
  const bool joint = t.size() == 1 && t.count("joint");
  const bool split = t.size() == 2 && t.count("img") && t.count("txt");
  if (!joint && !split) return absl::InvalidArgumentError("expected exactly 'img' and 'txt', or 'joint'");
  for (const auto& [name, g] : t) {
    if (g.dim() != 3 || g.size(2) != c.inner_dim() || !g.is_floating_point()) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is ", c10::toString(g.scalar_type()), " ",
                                                     ShapeString(g.sizes()), ", expected floating [b, S, ",
                                                     c.inner_dim(), "]"));
    }
  }
  if (split && t.at("img").size(0) != t.at("txt").size(0)) {
    return absl::InvalidArgumentError("img and txt batch sizes differ");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Flux2Family::CheckWire(WireKind kind, const TensorMap& tensors, at::ScalarType dtype) const {
  if (kind == WireKind::kTarget && tensors.count(kLossWeightingName)) {
    ASSIGN_OR_RETURN(TensorMap rest, WithoutLossWeighting(tensors));
    return CheckWire(kind, rest, dtype);
  }
  switch (kind) {
    case WireKind::kInputs:
      return CheckInputs(tensors, config_);
    case WireKind::kConstants:
      return CheckConstants(tensors, config_);
    case WireKind::kTables:
      return CheckTables(tensors);
    case WireKind::kActivation:
      return ActivationsFromTensors(tensors, config_, dtype).status();
    case WireKind::kTarget:
      return CheckTarget(tensors, config_);
    case WireKind::kGradient:
      return CheckGradient(tensors, config_);
  }
  return absl::InvalidArgumentError("unknown wire kind");
}

}  // namespace baton
