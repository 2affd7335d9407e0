// Status helpers. Debian's Abseil (20220623) has no status macros, so they live here.
// libtorch reports errors by throwing c10::Error; TorchCall() turns that into a Status at the edges
// where untrusted input reaches libtorch.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>
#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <string>
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

// The message of a libtorch error without the C++ backtrace c10::Error appends ("Exception raised from ...",
// frame lists): statuses travel to users and peers, stack frames help neither.
std::string StripTorchBacktrace(std::string what);

// Runs fn(); a thrown exception becomes a status prefixed with `context`: out of memory (c10::OutOfMemoryError,
// std::bad_alloc) RESOURCE_EXHAUSTED with one short line, anything else (c10::Error, std::exception) INTERNAL.
template <typename Fn>
absl::Status TorchCall(const char* context, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const c10::OutOfMemoryError& e) {
    std::string what = StripTorchBacktrace(e.what_without_backtrace());
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return absl::ResourceExhaustedError(absl::StrCat(context, ": out of memory: ", what));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(context, ": out of memory (host allocation failed)"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", StripTorchBacktrace(e.what())));
  }
}

// Prefixes a non-OK status with context, keeping its code.
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace baton
