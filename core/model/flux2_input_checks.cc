#include "core/model/flux2_input_checks.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <vector>

#include "core/tensor/shape.h"

namespace baton {
namespace {

absl::Status Bad(const std::string& path, absl::string_view name, absl::string_view why, const at::Tensor& t) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " ", why, " (it is ", DtypeShapeString(t), ")"));
}

bool IsNumeric(const at::Tensor& t) { return t.scalar_type() != at::kBool && !at::isComplexType(t.scalar_type()); }

absl::Status Require(const std::map<std::string, at::Tensor>& inputs, const std::vector<std::string>& keys,
                     const std::string& path) {
  for (const auto& key : keys) {
    if (!inputs.count(key)) {
      std::vector<std::string> present;
      for (const auto& [name, t] : inputs) present.push_back(name);
      return absl::InvalidArgumentError(absl::StrCat(path, ": missing input '", key, "' (the file has ",
                                                     present.empty() ? "no tensors" : absl::StrJoin(present, ", "),
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

// [B, S, dim] floating point with B, S > 0.
absl::Status CheckSequence(const std::string& path, const char* name, const at::Tensor& t, int64_t dim) {
  const std::string want = absl::StrCat("must be floating point [B, S, ", dim, "] with B, S > 0");
  if (t.dim() != 3 || t.size(2) != dim || t.size(0) == 0 || t.size(1) == 0) return Bad(path, name, want, t);
  if (!at::isFloatingType(t.scalar_type())) return Bad(path, name, want, t);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFlux2ForwardInputs(const std::map<std::string, at::Tensor>& inputs, const Flux2Config& c,
                                     const std::string& path) {
  std::vector<std::string> required = {"hidden_states", "encoder_hidden_states", "timestep", "img_ids", "txt_ids"};
  if (c.guidance_embeds) required.push_back("guidance");
  if (auto s = Require(inputs, required, path); !s.ok()) return s;
  const at::Tensor& hs = inputs.at("hidden_states");
  const at::Tensor& ehs = inputs.at("encoder_hidden_states");
  if (auto s = CheckSequence(path, "hidden_states", hs, c.in_channels); !s.ok()) return s;
  if (auto s = CheckSequence(path, "encoder_hidden_states", ehs, c.joint_attention_dim); !s.ok()) return s;
  if (ehs.size(0) != hs.size(0)) {
    return Bad(path, "encoder_hidden_states", absl::StrCat("must have hidden_states' batch ", hs.size(0)), ehs);
  }
  const int64_t axes = static_cast<int64_t>(c.axes_dims_rope.size());
  for (const auto& [name, rows] : {std::pair<const char*, int64_t>{"img_ids", hs.size(1)}, {"txt_ids", ehs.size(1)}}) {
    const at::Tensor& t = inputs.at(name);
    const bool batched = t.dim() == 3 && t.size(0) >= 1;  // diffusers accepts batched ids and uses the first
    const at::Tensor& ids = batched ? t[0] : t;
    if (!IsNumeric(t) || ids.dim() != 2 || ids.size(0) != rows || ids.size(1) != axes) {
      return Bad(path, name, absl::StrCat("must be numeric [", rows, ", ", axes, "] or [B, ", rows, ", ", axes, "]"),
                 t);
    }
  }
  for (const char* name : {"timestep", "guidance"}) {
    if (!inputs.count(name)) continue;
    const at::Tensor& t = inputs.at(name);
    if (!IsNumeric(t) || t.dim() > 1 || (t.dim() == 1 && t.size(0) != hs.size(0) && t.size(0) != 1)) {
      return Bad(path, name, absl::StrCat("must be a numeric scalar, [1] or [", hs.size(0), "]"), t);
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
