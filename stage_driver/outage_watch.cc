#include "stage_driver/outage_watch.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <cmath>

#include "core/util/log.h"

namespace baton {
namespace {

double Seconds(OutageWatch::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void OutageWatch::Configure(int first_worker, std::string prefix, absl::Duration every, OnOutage on_outage) {
  absl::MutexLock lock(&mu_);
  first_worker_ = first_worker;
  prefix_ = std::move(prefix);
  every_ = std::max(1.0, absl::ToDoubleSeconds(every));
  on_outage_ = std::move(on_outage);
}

double OutageWatch::FirstAfterSeconds() const {
  absl::MutexLock lock(&mu_);
  return every_ / 2;
}

void OutageWatch::Silent(int stage, const std::string& name, double seconds, const std::string& doing,
                         Clock::time_point now) {
  std::vector<StageOutage> reports;
  {
    absl::MutexLock lock(&mu_);
    auto [it, opened] = open_.try_emplace(stage);
    Outage& o = it->second;
    if (opened) {
      o.name = prefix_ + name;
      o.since = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    }
    const double silent = Seconds(now - o.since);
    StageOutage report{first_worker_ + stage, o.name, silent};
    if (opened || Seconds(now - o.last_notice) >= every_) {
      o.last_notice = o.last_refresh = now;
      report.notice = true;
      report.message = silent < 1 ? absl::StrCat(o.name, " does not answer (", doing, ")")
                                  : absl::StrFormat("%s has not answered for %.0f s (%s)", o.name, silent, doing);
      reports.push_back(report);
    } else if (Seconds(now - o.last_refresh) >= 1) {
      o.last_refresh = now;
      reports.push_back(report);
    }
  }
  Emit(reports);
}

void OutageWatch::Answered(int stage, Clock::time_point now) { End(stage, "", now); }

void OutageWatch::End(int stage, const std::string& name, Clock::time_point now) {
  std::vector<StageOutage> reports;
  {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(stage);
    if (it == open_.end()) return;
    const double silent = Seconds(now - it->second.since);
    StageOutage report{first_worker_ + stage, it->second.name, silent, /*over=*/true, /*notice=*/true};
    const std::string now_named = name.empty() ? it->second.name : prefix_ + name;
    report.message = now_named == it->second.name
                         ? absl::StrFormat("%s is back after %.0f s without an answer", it->second.name, silent)
                         : absl::StrFormat("%s was replaced after %.0f s without an answer: %s answers in its place",
                                           it->second.name, silent, now_named);
    reports.push_back(report);
    open_.erase(it);
  }
  Emit(reports);
}

void OutageWatch::AnsweredAll(Clock::time_point now) { AnsweredAllAs({}, now); }

void OutageWatch::AnsweredAllAs(const std::vector<std::string>& names, Clock::time_point now) {
  std::vector<int> stages;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [stage, outage] : open_) stages.push_back(stage);
  }
  for (int stage : stages) End(stage, stage < static_cast<int>(names.size()) ? names[stage] : "", now);
}

bool OutageWatch::Open(int stage) const {
  absl::MutexLock lock(&mu_);
  return open_.count(stage) > 0;
}

void OutageWatch::Emit(const std::vector<StageOutage>& reports) const {
  for (const StageOutage& report : reports) {
    if (report.notice) LogWarning(report.message);
    if (on_outage_) on_outage_(report);
  }
}

}  // namespace baton
