#include "core/util/log.h"

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/clock.h>
#include <absl/time/time.h>

#include <cstdio>

namespace baton {
namespace {
ABSL_CONST_INIT absl::Mutex g_log_mu(absl::kConstInit);  // also keeps whole lines from interleaving
std::string g_tag ABSL_GUARDED_BY(g_log_mu) = "baton";
}  // namespace

void SetLogTag(const std::string& tag) {
  absl::MutexLock lock(&g_log_mu);
  g_tag = tag;
}

void LogLine(LogLevel level, const std::string& message) {
  const char* lv = level == LogLevel::kInfo ? "I" : level == LogLevel::kWarning ? "W" : "E";
  std::string ts = absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone());
  absl::MutexLock lock(&g_log_mu);
  std::fprintf(stderr, "%s %s %s] %s\n", lv, ts.c_str(), g_tag.c_str(), message.c_str());
  std::fflush(stderr);
}

}  // namespace baton
