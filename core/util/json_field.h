// Typed, optional fields of a JSON config (diffusers/transformers config.json): the one reader the FLUX.2,
// VAE and text-encoder config parsers share, so a wrong type reads the same everywhere.
#pragma once

#include <absl/status/status.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/string_view.h>

#include <exception>
#include <nlohmann/json.hpp>

namespace baton {

// Reads j[key] into *out when present and not null; otherwise *out keeps its default. A value of the wrong type
// is INVALID_ARGUMENT "<source>: field '<key>': ...". `found`, when given, says whether the field was read.
template <typename Json, typename T>
absl::Status ReadJsonField(const Json& j, const char* key, absl::string_view source, T* out, bool* found = nullptr) {
  if (found != nullptr) *found = false;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  try {
    *out = it->template get<T>();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": field '", key, "': ", e.what()));
  }
  if (found != nullptr) *found = true;
  return absl::OkStatus();
}

}  // namespace baton
