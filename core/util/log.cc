#include "core/util/log.h"

#include <absl/time/clock.h>
#include <absl/time/time.h>

#include <cstdio>
#include <mutex>

namespace baton {
namespace {
std::mutex g_mu;
std::string g_tag = "baton";
}  // namespace

void SetLogTag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_tag = tag;
}

void LogLine(LogLevel level, const std::string& message) {
  const char* lv = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  std::string ts = absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone());
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "%s %s %s] %s\n", lv, ts.c_str(), g_tag.c_str(), message.c_str());
  std::fflush(stderr);
}

}  // namespace baton
