// The job service's core, with no RPC in it: submitted jobs wait in order and run through RunCoordinator on the
// service's set of stage workers, each into its own output folder <root>/<name>-<id>/. The job at the head of the
// queue starts when nothing runs, or beside the running jobs when it trains the same frozen model over the same
// stages and every memory budget leaves room for it (JoinBlockerLocked): then the stage workers hold each job's
// adapters over one copy of the model (no load: it starts at once) and fill one job's pipeline bubbles with another's
// work. A submitted sweep (core/train/sweep.h) becomes one job per member, all running side by side. Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "baton/v1/job_service.pb.h"
#include "coordinator/run_types.h"
#include "job_service/job_history.h"
#include "job_service/job_submission.h"
#include "stage_driver/shared_workers.h"

namespace baton {

// Now, in seconds since the Unix epoch (the jobs' submit, start, end and outage times).
double NowUnix();

// The step after which a watch event's validation or samples were made.
int64_t EvalStep(const v1::WatchEvent& e);

// What a watcher has seen of a job.
struct WatchCursor {
  int64_t from_step = 0;        // the steps up to this one
  size_t checkpoints_seen = 0;  // the job's first checkpoints
  size_t evals_seen = 0;        // the job's first evaluations
  // The job's first outage notices (kLiveOnly: those said before the first update, which a watch does not replay).
  static constexpr uint64_t kLiveOnly = UINT64_MAX;
  uint64_t outages_seen = kLiveOnly;
  // The job's resumes this watcher has seen (kNone: none yet known): after another, the cursor goes back to the step
  // the run went back to, so the steps and evaluations redone are seen again.
  static constexpr uint64_t kNone = UINT64_MAX;
  uint64_t restarts_seen = kNone;
};

// `cursor` for a job resumed `restarts` times, the last from step `restarted_from`, whose checkpoints and evaluations
// are now these: after a resume it had not seen, taken back to that step (the steps and evaluations after it were
// dropped and are being redone, so a watcher sees them again); else as given. Either way it notes `restarts`.
WatchCursor AfterRestarts(WatchCursor cursor, uint64_t restarts, int64_t restarted_from,
                          const std::vector<int64_t>& checkpoints, const std::vector<v1::WatchEvent>& evals);

// What a watcher has not seen yet: the job now, and the steps, checkpoints and evaluations after its cursor.
struct JobUpdate {
  v1::JobInfo job;
  std::vector<v1::StepProgress> steps;  // steps after `from_step`, in order
  std::vector<int64_t> checkpoints;     // checkpoint steps after the first `checkpoints_seen`
  std::vector<v1::WatchEvent> evals;    // validation or samples events after the first `evals_seen`, in order
  std::vector<v1::WatchEvent> outages;  // outage events after the first `outages_seen`, in order
  uint64_t outages_seen = 0;            // the cursor's outages_seen after these
  WatchCursor from;                     // the cursor these follow: the one given, or where a resume took it back
  uint64_t version = 0;                 // pass back to WaitForUpdate
  bool ended() const { return job.state() >= v1::JOB_STATE_FINISHED; }
};

// The queue records each job's state and every step (CoordinatorHooks), so that status, list and watch can read
// them, and keeps <root>/<name>-<id>/job.json current on every state change: after a restart the finished history
// is back, the job that Shutdown stopped resumes from its checkpoint first, and jobs that were queued are queued
// again (a job that was running when the process died without Shutdown is marked failed; its checkpoints stay).
class JobQueue {
 public:
  // `base`: every job's options (stages, workers, timeouts). output_dir, steps, resume and quiet are set per job;
  // base.hooks (on_start, on_step, on_checkpoint) run after the queue's own for every job; the stop flag is
  // per job.
  // `data_root`: submitted jobs may name paths only inside it (ValidateSubmittedJob); empty: anywhere.
  JobQueue(CoordinatorOptions base, std::string output_root, std::string data_root = "");
  ~JobQueue();  // Shutdown()

  // Reloads <root>/*/job.json and starts the runner thread: Load, then Run.
  absl::Status Start();
  // Reloads <root>/*/job.json (the history, the queue, the jobs a stop interrupted), running nothing yet.
  absl::Status Load();
  // Starts the runner thread: the queue's jobs run from now (the service calls it once its port is bound).
  void Run();
  // Parses, validates (InvalidArgument with file:line) and queues a job (a sweep: one job per member, in order; the
  // first member's is returned, the others' into `others`).
  absl::StatusOr<v1::JobInfo> Submit(const SubmittedJob& submitted, std::vector<v1::JobInfo>* others = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // By id; empty id: the running job, else the newest one. NotFound.
  absl::StatusOr<v1::JobInfo> Get(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The job's adapters (its lora: spec), what a checkpoint's raw LoRA is written out with for a download.
  absl::StatusOr<LoraSpec> Lora(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Running, then queued in order, then ended ones newest first.
  std::vector<v1::JobInfo> List() const ABSL_LOCKS_EXCLUDED(mu_);
  // Running: stop after the current step with a checkpoint. Queued: dropped (STOPPED). Ended: FailedPrecondition.
  absl::StatusOr<v1::JobInfo> Stop(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues a stopped or failed job again, to continue from its newest checkpoint (from the start with none).
  // NotFound; FailedPrecondition for a job that is queued, running or finished; InvalidArgument when its job file no
  // longer parses (e.g. its model was moved).
  absl::StatusOr<v1::JobInfo> Continue(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's history (job_history.h): its steps downsampled to `max_points`, its validations and sample renderings,
  // and the last `log_lines` lines of its train_log.jsonl. NotFound.
  absl::StatusOr<v1::HistoryResponse> History(const std::string& job_id, int max_points, int log_lines) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the job's version passes `seen_version` or `timeout` passes, then returns what is new.
  // Empty job_id: the running job, else the first queued one (NotFound when neither).
  absl::StatusOr<JobUpdate> WaitForUpdate(const std::string& job_id, uint64_t seen_version, const WatchCursor& cursor,
                                          absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);
  // Stops the running job with a checkpoint and waits for it; job.json marks it to resume on the next Start,
  // and queued jobs stay queued.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Job {
    v1::JobInfo info;
    SubmittedJob submitted;
    JobConfig config;
    std::vector<v1::StepProgress> steps;
    std::vector<int64_t> checkpoints;
    std::vector<v1::WatchEvent> evals;   // each with its validation or samples set
    std::deque<v1::WatchEvent> outages;  // each with its outage set: the last kKeptOutages of outage_count
    uint64_t outage_count = 0;
    uint64_t restarts = 0;       // runs resumed from a checkpoint (Restarted)
    int64_t restarted_from = 0;  // the step the last one went back to
    uint64_t version = 1;
    double run_seconds = 0;    // sum of step times, for the ETA
    bool resume = false;       // continue from the newest checkpoint in the output folder
    bool interrupted = false;  // stopped by Shutdown, not by a client: resumes after a restart
    std::unique_ptr<std::atomic<bool>> stop = std::make_unique<std::atomic<bool>>(false);
    // The planner's bytes per stage, all of them and one member's share (RunStart), once the run has started.
    std::vector<int64_t> planned_bytes, member_bytes;
    // What its stage workers hold of the frozen weights (FrozenPipelineKey): planned when queued, its run's own once
    // started (RunStart). A job shares the running ones' workers only with an equal key. "": not known (its dataset
    // is an encoder worker's to build first): it runs alone.
    std::string frozen_key;
  };

  void RunnerMain() ABSL_LOCKS_EXCLUDED(mu_);
  // A parsed and validated job into the queue, under a new id; its info.
  v1::JobInfo EnqueueLocked(SubmittedJob submitted, JobConfig config, std::string frozen_key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why `next` may not start beside the running jobs (see the class comment); empty when it may. Also while one of
  // them has not yet reported its plan.
  std::string JoinBlockerLocked(const Job& next) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The head of the queue as running: its state, and its thread.
  void StartLocked(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunOne(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  CoordinatorHooks HooksFor(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void OnStep(int64_t id, const PipelineStepRecord& rec) ABSL_LOCKS_EXCLUDED(mu_);
  void OnEval(int64_t id, const EvalReport& report) ABSL_LOCKS_EXCLUDED(mu_);
  void OnOutage(int64_t id, const StageOutage& outage) ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(int64_t id, const absl::StatusOr<CoordinatorResult>& result) ABSL_LOCKS_EXCLUDED(mu_);
  void FinishLocked(int64_t id, const absl::StatusOr<CoordinatorResult>& result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bumps the version; the watchers' WaitForUpdate conditions see it when mu_ is released.
  void Changed(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A run (re)starts after `first_step` steps: what was recorded after it is redone, so it goes.
  void Restarted(Job& job, int64_t first_step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Persist(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);
  // One job.json read back (job_store.cc); nullopt, said in the log, when it cannot be read as a record.
  static std::optional<std::pair<int64_t, Job>> ParseRecord(const std::string& path, const std::string& text);
  // Empty id: the running job, else the newest.
  const Job* FindLocked(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobInfo InfoLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // with its queue position

  const CoordinatorOptions base_;
  const std::string root_;
  const std::string data_root_;
  mutable absl::Mutex mu_;
  std::map<int64_t, Job> jobs_ ABSL_GUARDED_BY(mu_);          // by id
  std::deque<int64_t> queue_ ABSL_GUARDED_BY(mu_);            // waiting, in order
  std::set<int64_t> running_ ABSL_GUARDED_BY(mu_);            // one job, or several sharing the stage workers
  std::map<int64_t, std::thread> runs_ ABSL_GUARDED_BY(mu_);  // the running jobs' threads (and ended ones' to join)
  // The local stage workers the running jobs share (null with --workers, or when nothing runs): started by the first
  // job, stopped after the last one.
  std::shared_ptr<SharedStageWorkers> workers_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::thread runner_;
};

}  // namespace baton
