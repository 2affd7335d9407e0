// Status helpers. Debian's Abseil (20220623) has no status macros, so they live here.
// libtorch reports errors by throwing c10::Error; TorchCall() turns that into a Status at the edges
// where untrusted input reaches libtorch.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include <exception>
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
// A libtorch message about a failed allocation (CPU allocator, CUDA caching allocator).
bool IsOutOfMemoryMessage(const std::string& what);
// `text` up to its first newline, at most 300 characters.
std::string FirstLine(const std::string& text);

// The status for the exception being handled (call only inside a catch block): out of memory
// (c10::OutOfMemoryError, std::bad_alloc, libtorch's CPU allocator failing) is RESOURCE_EXHAUSTED with one short
// line, anything else INTERNAL; `context` prefixes the message, which never carries a libtorch backtrace.
absl::Status StatusFromCurrentException(const char* context);

// Runs fn(); a thrown exception becomes StatusFromCurrentException(context). fn runs at once on the caller's
// thread, so the locks fn requires (a lambda's ABSL_EXCLUSIVE_LOCKS_REQUIRED) are the caller's to hold.
template <typename Fn>
absl::Status TorchCall(const char* context, Fn&& fn) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  try {
    fn();
    return absl::OkStatus();
  } catch (...) {
    return StatusFromCurrentException(context);
  }
}

// Prefixes a non-OK status with context, keeping its code.
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace baton
