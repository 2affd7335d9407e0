// How every error message and log line writes a tensor shape: "[2, 3, 4]" ("[]" for a scalar).
#pragma once

#include <ATen/core/Tensor.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <c10/util/ArrayRef.h>

#include <string>

namespace baton {

// Takes a tensor's sizes() or a std::vector<int64_t> (both convert to IntArrayRef).
inline std::string ShapeString(c10::IntArrayRef shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

// A tensor's dtype and shape, as a check says what it was given: "Float [2, 3]" ("undefined" for no tensor).
inline std::string DtypeShapeString(const at::Tensor& t) {
  return t.defined() ? absl::StrCat(c10::toString(t.scalar_type()), " ", ShapeString(t.sizes())) : "undefined";
}

}  // namespace baton
