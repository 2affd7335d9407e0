// Status helpers. Debian's Abseil (20220623) has no status macros, so they live here. No libtorch: a libtorch
// exception becomes a Status through core/tensor/torch_call.h; the strings it leaves are cleaned here.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

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

// Prefixes a non-OK status with context, keeping its code.
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace baton
