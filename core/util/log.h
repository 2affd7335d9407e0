// Minimal leveled logging to stderr (Debian's Abseil predates absl/log).
#pragma once

#include <absl/strings/str_cat.h>

namespace baton {

enum class LogLevel { kInfo, kWarning, kError };
void LogLine(LogLevel level, const std::string& message);

template <typename... Args>
void LogInfo(const Args&... args) {
  LogLine(LogLevel::kInfo, absl::StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  LogLine(LogLevel::kWarning, absl::StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  LogLine(LogLevel::kError, absl::StrCat(args...));
}

// Set by each binary's main (e.g. "stage_worker[1]") so interleaved logs say who spoke.
void SetLogTag(const std::string& tag);

}  // namespace baton
