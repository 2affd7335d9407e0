#include "tools/input_checks.h"

#include <absl/strings/str_cat.h>

#include <vector>

#include "core/model/flux2_input_checks.h"
#include "core/tensor/shape.h"

namespace baton {
namespace {

absl::Status Bad(const std::string& path, absl::string_view name, absl::string_view why, const at::Tensor& t) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " ", why, " (it is ", DtypeShapeString(t), ")"));
}

}  // namespace

absl::Status CheckForwardInputs(const std::map<std::string, at::Tensor>& inputs, const Flux2Config& c,
                                const std::string& path) {
  return CheckFlux2ForwardInputs(inputs, c, path);
}

absl::Status CheckPixels(const std::map<std::string, at::Tensor>& inputs, int64_t multiple, const std::string& path) {
  if (!inputs.count("pixels")) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing 'pixels' [B, 3, H, W] in [-1, 1]"));
  }
  const at::Tensor& t = inputs.at("pixels");
  if (t.dim() != 4 || t.size(0) == 0 || t.size(1) != 3 || t.size(2) == 0 || t.size(3) == 0 ||
      t.size(2) % multiple != 0 || t.size(3) % multiple != 0 || !at::isFloatingType(t.scalar_type())) {
    return Bad(path, "pixels",
               absl::StrCat("must be floating point [B, 3, H, W] with B > 0 and H, W positive multiples of ", multiple,
                            " (this VAE's 2 x downsampling factor)"),
               t);
  }
  return absl::OkStatus();
}

absl::Status CheckInputIds(const std::map<std::string, at::Tensor>& inputs, int64_t vocab_size,
                           const std::string& path) {
  if (!inputs.count("input_ids")) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing 'input_ids' int64 [1, L]"));
  }
  const at::Tensor& t = inputs.at("input_ids");
  if (t.dim() != 2 || t.size(0) != 1 || t.size(1) == 0 || !at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
    return Bad(path, "input_ids", "must be integer [1, L] with L > 0", t);
  }
  const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
  if (lo < 0 || hi >= vocab_size) {
    return Bad(
        path, "input_ids",
        absl::StrCat("holds ids in [", lo, ", ", hi, "]; the text encoder's vocabulary is [0, ", vocab_size, ")"), t);
  }
  return absl::OkStatus();
}

}  // namespace baton
