// Typed, optional fields of a JSON config (diffusers/transformers config.json): the one reader the FLUX.2,
// VAE and text-encoder config parsers share, so a wrong type reads the same everywhere.
#pragma once

#include <absl/status/status.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>

namespace baton {

// A config.json is under a few KiB; 1 MiB bounds what a bogus path (/dev/zero, a weights file) can cost.
inline constexpr uint64_t kMaxConfigJsonBytes = uint64_t{1} << 20;

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

// As ReadJsonField, but a missing field is INVALID_ARGUMENT "<source>: required field '<key>' is missing".
template <typename Json, typename T>
absl::Status RequireJsonField(const Json& j, const char* key, absl::string_view source, T* out) {
  bool found = false;
  absl::Status status = ReadJsonField(j, key, source, out, &found);
  if (status.ok() && !found) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": required field '", key, "' is missing"));
  }
  return status;
}

}  // namespace baton
