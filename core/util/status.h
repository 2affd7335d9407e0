// Status helpers. Debian's Abseil (20220623) has no status macros, so they live here.
// libtorch reports errors by throwing c10::Error; TorchCall() turns that into a Status at the edges
// where untrusted input reaches libtorch.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include <exception>
#include <utility>

#define BATON_CONCAT_INNER_(a, b) a##b
#define BATON_CONCAT_(a, b) BATON_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status baton_status_ = (expr);         \
    if (!baton_status_.ok()) return baton_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL_(BATON_CONCAT_(baton_statusor_, __LINE__), lhs, expr)

namespace baton {

// Runs fn(); a thrown exception (c10::Error from libtorch, std::exception otherwise) becomes an
// INTERNAL status prefixed with `context`.
template <typename Fn>
absl::Status TorchCall(const char* context, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    std::string what = e.what();
    // c10::Error messages carry a long backtrace after the first line; keep the message only.
    auto pos = what.find("\nException raised from");
    if (pos != std::string::npos) what.resize(pos);
    return absl::InternalError(absl::StrCat(context, ": ", what));
  }
}

// Prefixes a non-OK status with context, keeping its code.
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace baton
