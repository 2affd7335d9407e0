// Which stage workers do not answer, and for how long, said while it lasts (a dead link or a stopped host looks like
// a slow step otherwise): the stall watch of a step or pass and the recovery's wait for a remote worker report here;
// a line once a stage has been silent for half the stall timeout, again every stall timeout, and when it is back.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace baton {

// One report of an outage (CoordinatorHooks::on_outage: the log line, the job service's watch, the metric).
struct StageOutage {
  int worker = 0;       // the global worker index (replica r's stage i: FirstWorker(r) + i)
  std::string name;     // "stage 1 (10.0.0.2:7001)", "replica 1: stage 0 (...)" with replicas
  double seconds = 0;   // since it last answered (with `over`: how long it did not)
  bool over = false;    // it answers again
  bool notice = false;  // a line (the first, a periodic one, the last); else a refresh of `seconds`, at most 1/s
  std::string message;  // the line, as logged (notices only)
};
using OnOutage = std::function<void(const StageOutage&)>;

// Thread-safe. Reports run outside the lock, on the reporting thread.
class OutageWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // `first_worker`: this fleet's stage 0 as a global worker index; `prefix` goes before names ("replica 1: ");
  // `every`: the stall timeout (the first line after half of it, then one per `every`); `on_outage` (optional) gets
  // every report. Before the first Silent.
  void Configure(int first_worker, std::string prefix, absl::Duration every, OnOutage on_outage)
      ABSL_LOCKS_EXCLUDED(mu_);
  // How long a stage may be silent before it is reported (half the stall timeout).
  double FirstAfterSeconds() const ABSL_LOCKS_EXCLUDED(mu_);
  // Stage `stage` (this fleet's index, named `name`) has not answered for `seconds`; `doing` says what waits for it.
  // An outage already open keeps its start (the recovery's wait passes 0: it does not know when the silence began).
  void Silent(int stage, const std::string& name, double seconds, const std::string& doing,
              Clock::time_point now = Clock::now()) ABSL_LOCKS_EXCLUDED(mu_);
  // Stage `stage` answers (again): its outage, if one is open, ends with a line.
  void Answered(int stage, Clock::time_point now = Clock::now()) ABSL_LOCKS_EXCLUDED(mu_);
  void AnsweredAll(Clock::time_point now = Clock::now()) ABSL_LOCKS_EXCLUDED(mu_);
  // After a recovery, every stage answers as `names` (by stage) calls it now: an outage of a worker that another took
  // the place of (a new address) ends saying so, not that the silent one is back.
  void AnsweredAllAs(const std::vector<std::string>& names, Clock::time_point now = Clock::now())
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Open(int stage) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Outage {
    std::string name;
    Clock::time_point since, last_notice, last_refresh;
  };
  void Emit(const std::vector<StageOutage>& reports) const;
  // Answered's work; `name` (not empty): the one that answers now, when another took the silent one's place.
  void End(int stage, const std::string& name, Clock::time_point now) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  int first_worker_ ABSL_GUARDED_BY(mu_) = 0;
  std::string prefix_ ABSL_GUARDED_BY(mu_);
  double every_ ABSL_GUARDED_BY(mu_) = 15;           // seconds
  OnOutage on_outage_;                               // set by Configure, before any report
  std::map<int, Outage> open_ ABSL_GUARDED_BY(mu_);  // by stage
};

}  // namespace baton
