#include "ui/job_words.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <cmath>
#include <cstdint>

namespace baton {

std::string JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_QUEUED:
      return "queued";
    case v1::JOB_STATE_RUNNING:
      return "running";
    case v1::JOB_STATE_FINISHED:
      return "finished";
    case v1::JOB_STATE_FAILED:
      return "failed";
    case v1::JOB_STATE_STOPPED:
      return "stopped";
    default:
      return "unknown";
  }
}

std::string FormatDuration(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "-";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

}  // namespace baton
