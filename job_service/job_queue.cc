#include "job_service/job_queue.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "coordinator/checkpoint.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/expert_runs.h"
#include "coordinator/pipeline_trainer.h"
#include "core/pipeline/partition.h"
#include "core/train/sweep.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "job_service/job_admission.h"

namespace baton {
namespace {

bool Ended(v1::JobState s) { return s >= v1::JOB_STATE_FINISHED; }

}  // namespace

double NowUnix() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

int64_t EvalStep(const v1::WatchEvent& e) { return e.has_validation() ? e.validation().step() : e.samples().step(); }

JobQueue::JobQueue(CoordinatorOptions base, std::string output_root, std::string data_root)
    : base_(std::move(base)), root_(std::move(output_root)), data_root_(std::move(data_root)) {}

JobQueue::~JobQueue() { Shutdown(); }

absl::Status JobQueue::Start() {
  RETURN_IF_ERROR(Load());
  Run();
  return absl::OkStatus();
}

absl::Status JobQueue::Load() {
  RETURN_IF_ERROR(MakeDirs(root_));
  return Reload();
}

void JobQueue::Run() {
  runner_ = std::thread([this] { RunnerMain(); });
}

absl::StatusOr<v1::JobInfo> JobQueue::Submit(const SubmittedJob& submitted, std::vector<v1::JobInfo>* others) {
  ASSIGN_OR_RETURN(JobConfig config, ParseSubmittedJob(submitted));
  std::vector<std::pair<SubmittedJob, JobConfig>> jobs;  // the job, or one per member of its sweep
  if (config.sweep.empty()) {
    jobs.emplace_back(submitted, std::move(config));
  } else {
    ASSIGN_OR_RETURN(std::vector<SweepMember> members, ExpandSweep(config));
    for (const SweepMember& m : members) {
      SubmittedJob one = submitted;
      one.sweep_member = m.name;
      one.name =
          absl::StrCat(submitted.name.empty() ? DefaultJobName(submitted.job_file) : submitted.name, ".", m.name);
      ASSIGN_OR_RETURN(JobConfig member, ParseSubmittedJob(one));  // its paths resolved as the job's are
      jobs.emplace_back(std::move(one), std::move(member));
    }
  }
  std::vector<std::string> keys;
  for (const auto& [one, job] : jobs) {
    keys.emplace_back();  // planned by the check: the job is planned once
    RETURN_IF_ERROR(ValidateSubmittedJob(one, job, base_.stages, data_root_, &keys.back()));
  }
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("the coordinator is shutting down");
  const v1::JobInfo first = EnqueueLocked(std::move(jobs[0].first), std::move(jobs[0].second), keys[0]);
  for (size_t i = 1; i < jobs.size(); ++i) {
    v1::JobInfo member = EnqueueLocked(std::move(jobs[i].first), std::move(jobs[i].second), keys[i]);
    if (others != nullptr) others->push_back(std::move(member));
  }
  return first;
}

v1::JobInfo JobQueue::EnqueueLocked(SubmittedJob submitted, JobConfig config, std::string frozen_key) {
  const int64_t id = next_id_++;
  Job& job = jobs_[id];
  job.frozen_key = std::move(frozen_key);
  job.submitted = std::move(submitted);
  job.submitted.name =
      job.submitted.name.empty() ? DefaultJobName(job.submitted.job_file) : SafeJobName(job.submitted.name);
  job.config = std::move(config);
  job.info.set_job_id(absl::StrCat(id));
  job.info.set_name(job.submitted.name);
  job.info.set_state(v1::JOB_STATE_QUEUED);
  job.info.set_job_file(job.submitted.job_file);
  job.info.set_output_dir(JoinPath(root_, absl::StrCat(job.submitted.name, "-", id)));
  job.info.set_submit_time_unix(NowUnix());
  job.info.set_total_steps(job.config.steps);
  job.info.set_model(job.config.model);
  queue_.push_back(id);
  Persist(job);
  Changed(job);
  return InfoLocked(job);
}

absl::StatusOr<v1::JobInfo> JobQueue::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  const Job* job = FindLocked(job_id);
  if (job == nullptr) return absl::NotFoundError(job_id.empty() ? "no jobs yet" : absl::StrCat("no job ", job_id));
  return InfoLocked(*job);
}

absl::StatusOr<LoraSpec> JobQueue::Lora(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  const Job* job = FindLocked(job_id);
  if (job == nullptr) return absl::NotFoundError(job_id.empty() ? "no jobs yet" : absl::StrCat("no job ", job_id));
  // From the job file as submitted (a sweep member's value applied): a finished job reloaded after a restart keeps
  // only that, not its parsed config.
  ASSIGN_OR_RETURN(const JobConfig config, ParseSubmittedJob(job->submitted));
  return config.lora;
}

std::vector<v1::JobInfo> JobQueue::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::JobInfo> out;
  for (int64_t id : running_) out.push_back(InfoLocked(jobs_.at(id)));
  for (int64_t id : queue_) out.push_back(InfoLocked(jobs_.at(id)));
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    if (Ended(it->second.info.state())) out.push_back(InfoLocked(it->second));
  }
  return out;
}

absl::StatusOr<v1::JobInfo> JobQueue::Stop(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  if (!absl::SimpleAtoi(job_id, &id) || !jobs_.count(id)) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  Job& job = jobs_.at(id);
  if (Ended(job.info.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has already ended (", v1::JobState_Name(job.info.state()), ")"));
  }
  job.info.set_stop_requested(true);
  job.stop->store(true);
  if (job.info.state() == v1::JOB_STATE_QUEUED) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), id));
    job.info.set_state(v1::JOB_STATE_STOPPED);
    job.info.set_end_time_unix(NowUnix());
    Persist(job);
  }
  Changed(job);
  return InfoLocked(job);
}

absl::StatusOr<v1::JobInfo> JobQueue::Continue(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  if (!absl::SimpleAtoi(job_id, &id) || !jobs_.count(id)) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  if (shutdown_) return absl::UnavailableError("the coordinator is shutting down");
  Job& job = jobs_.at(id);
  const v1::JobState state = job.info.state();
  if (state != v1::JOB_STATE_STOPPED && state != v1::JOB_STATE_FAILED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(state), ": only a stopped or failed job can continue"));
  }
  ASSIGN_OR_RETURN(job.config, ParseSubmittedJob(job.submitted));
  job.frozen_key = PlannedFrozenKey(job.config, base_.stages);
  job.resume = true;  // from its newest checkpoint; with none, from the start (resume_if_any)
  job.interrupted = false;
  job.stop->store(false);
  job.info.set_stop_requested(false);
  job.info.clear_error();
  job.info.set_end_time_unix(0);
  job.info.set_state(v1::JOB_STATE_QUEUED);
  queue_.push_back(id);
  LogInfo("job ", id, ": continuing from its newest checkpoint (step ", job.info.last_checkpoint_step(), ")");
  Persist(job);
  Changed(job);
  return InfoLocked(job);
}

absl::StatusOr<v1::HistoryResponse> JobQueue::History(const std::string& job_id, int max_points, int log_lines) const {
  v1::HistoryResponse history;
  std::vector<v1::SamplesProgress> renderings;
  {
    absl::MutexLock lock(&mu_);
    const Job* job = FindLocked(job_id);
    if (job == nullptr) return absl::NotFoundError(job_id.empty() ? "no jobs yet" : absl::StrCat("no job ", job_id));
    *history.mutable_job() = InfoLocked(*job);
    for (v1::HistoryPoint& p : DownsampleSteps(job->steps, max_points)) *history.add_points() = std::move(p);
    history.set_logged_steps(static_cast<int64_t>(job->steps.size()));
    for (const v1::WatchEvent& e : job->evals) {
      if (e.has_validation()) *history.add_validations() = e.validation();
      if (e.has_samples()) renderings.push_back(e.samples());
    }
  }
  const std::string& dir = history.job().output_dir();  // the files are read outside the lock
  for (const v1::SamplesProgress& s : renderings) *history.add_samples() = ListSampleRendering(dir, s);
  for (std::string& line : TailLines(JoinPath(dir, "train_log.jsonl"), log_lines)) {
    history.add_log_tail(std::move(line));
  }
  return history;
}

WatchCursor AfterRestarts(WatchCursor cursor, uint64_t restarts, int64_t restarted_from,
                          const std::vector<int64_t>& checkpoints, const std::vector<v1::WatchEvent>& evals) {
  if (cursor.restarts_seen != WatchCursor::kNone && cursor.restarts_seen != restarts) {
    // What was seen after the step the run went back to was dropped (Restarted) and is being redone.
    cursor.from_step = std::min(cursor.from_step, restarted_from);
    cursor.checkpoints_seen = std::min<size_t>(
        cursor.checkpoints_seen,
        std::count_if(checkpoints.begin(), checkpoints.end(), [&](int64_t s) { return s <= restarted_from; }));
    cursor.evals_seen = std::min<size_t>(
        cursor.evals_seen,
        std::count_if(evals.begin(), evals.end(), [&](const auto& e) { return EvalStep(e) <= restarted_from; }));
  }
  cursor.restarts_seen = restarts;
  return cursor;
}

absl::StatusOr<JobUpdate> JobQueue::WaitForUpdate(const std::string& job_id, uint64_t seen_version,
                                                  const WatchCursor& given, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  // No id: the running job, else the first queued, else the newest (as status and the docs say).
  std::string id = job_id;
  if (id.empty() && (!running_.empty() || !queue_.empty())) {
    id = absl::StrCat(!running_.empty() ? *running_.begin() : queue_.front());
  }
  const Job* job = FindLocked(id);
  if (job == nullptr) return absl::NotFoundError(id.empty() ? "no jobs yet" : absl::StrCat("no job ", id));
  auto changed = [&] { return job->version != seen_version; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  JobUpdate update;
  update.from = AfterRestarts(given, job->restarts, job->restarted_from, job->checkpoints, job->evals);
  const WatchCursor& cursor = update.from;
  update.job = InfoLocked(*job);
  update.version = job->version;
  auto after = std::upper_bound(job->steps.begin(), job->steps.end(), cursor.from_step,
                                [](int64_t step, const v1::StepProgress& s) { return step < s.step(); });
  update.steps.assign(after, job->steps.end());
  for (size_t i = cursor.checkpoints_seen; i < job->checkpoints.size(); ++i) {
    update.checkpoints.push_back(job->checkpoints[i]);
  }
  for (size_t i = cursor.evals_seen; i < job->evals.size(); ++i) update.evals.push_back(job->evals[i]);
  update.outages_seen = job->outage_count;
  if (cursor.outages_seen != WatchCursor::kLiveOnly) {
    const uint64_t kept_from = job->outage_count - job->outages.size();
    for (uint64_t i = std::max(cursor.outages_seen, kept_from); i < job->outage_count; ++i) {
      update.outages.push_back(job->outages[i - kept_from]);
    }
  }
  return update;
}

void JobQueue::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    for (int64_t id : running_) {
      Job& job = jobs_.at(id);
      job.interrupted = true;
      job.stop->store(true);
      Changed(job);
    }
  }
  if (runner_.joinable()) runner_.join();
}

void JobQueue::RunnerMain() {
  while (true) {
    std::vector<std::thread> ended;
    {
      absl::MutexLock lock(&mu_);
      auto startable = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return shutdown_ ||
               (!queue_.empty() && (running_.empty() || JoinBlockerLocked(jobs_.at(queue_.front())).empty()));
      };
      mu_.Await(absl::Condition(&startable));
      if (shutdown_) break;
      for (auto it = runs_.begin(); it != runs_.end();) {  // the threads of runs that have ended
        if (running_.count(it->first)) {
          ++it;
        } else {
          ended.push_back(std::move(it->second));
          it = runs_.erase(it);
        }
      }
      const int64_t id = queue_.front();
      queue_.pop_front();
      StartLocked(id);
    }
    for (std::thread& t : ended) t.join();
  }
  std::map<int64_t, std::thread> runs;
  {
    absl::MutexLock lock(&mu_);
    runs.swap(runs_);
  }
  for (auto& [id, t] : runs) t.join();
}

void JobQueue::StartLocked(int64_t id) {
  if (running_.empty()) {
    if (base_.workers.empty()) workers_ = std::make_shared<SharedStageWorkers>();
  } else {
    LogInfo("job ", id, " joins job", running_.size() > 1 ? "s " : " ", absl::StrJoin(running_, ", "),
            " on their stage workers (the model is loaded once)");
  }
  running_.insert(id);
  Job& job = jobs_.at(id);
  job.info.set_state(v1::JOB_STATE_RUNNING);
  job.info.set_start_time_unix(NowUnix());
  job.planned_bytes.clear();
  job.member_bytes.clear();
  Persist(job);
  Changed(job);
  runs_[id] = std::thread([this, id] { RunOne(id); });
}

void JobQueue::RunOne(int64_t id) {
  CoordinatorOptions options = base_;
  const JobConfig* config = nullptr;
  std::string name;
  {
    absl::MutexLock lock(&mu_);
    const Job& job = jobs_.at(id);
    options.output_dir = job.info.output_dir();
    options.steps = job.config.steps;
    options.resume = job.resume;
    // Only a job Shutdown interrupted resumes; one interrupted before its first checkpoint starts fresh.
    options.resume_if_any = job.resume;
    name = job.info.name();
    config = &job.config;  // std::map nodes are stable and the config is not written while it runs
    if (Shareable(job.config, base_.replicas)) {  // others may join it (the stages keep every job's adapters apart)
      options.shared_stages = true;
      options.shared_workers = workers_;
    }
  }
  options.quiet = true;
  options.hooks = HooksFor(id);
  if (!options.metrics_address.empty()) AddMetricsHooks(name, &options.hooks);  // label job = the job's name
  LogInfo("job ", id, ": running into ", options.output_dir);
  // The service outlives its jobs: an exception that escapes a run fails that job, not the process.
  absl::StatusOr<CoordinatorResult> result = absl::InternalError("no result");
  try {
    result = RunCoordinatorJob(*config, options);
  } catch (const std::exception& e) {
    result = absl::InternalError(absl::StrCat("the run threw: ", e.what()));
  }
  Finish(id, result);
}

// The queue's hooks, each followed by the base options' own (e.g. the metrics), which see every job.
void JobQueue::Finish(int64_t id, const absl::StatusOr<CoordinatorResult>& result) {
  std::shared_ptr<SharedStageWorkers> idle;  // stopped outside the lock once the last running job has ended
  {
    absl::MutexLock lock(&mu_);
    FinishLocked(id, result);
    running_.erase(id);
    if (running_.empty()) idle = std::move(workers_);
  }
  if (idle) {
    absl::Status stopped = idle->Stop();
    if (!stopped.ok()) LogWarning("stopping the stage workers: ", stopped.ToString());
  }
}

void JobQueue::FinishLocked(int64_t id, const absl::StatusOr<CoordinatorResult>& result) {
  Job& job = jobs_.at(id);
  job.info.set_end_time_unix(NowUnix());
  job.info.clear_outages();  // nobody waits for them any more
  const bool stopped_at_start = !result.ok() && absl::IsCancelled(result.status()) && job.stop->load();
  if (stopped_at_start) {
    job.info.set_state(v1::JOB_STATE_STOPPED);  // stopped before its first step: nothing to checkpoint
  } else if (!result.ok()) {
    job.info.set_state(v1::JOB_STATE_FAILED);
    job.info.set_error(result.status().ToString());
    LogWarning("job ", id, " failed: ", result.status().ToString());
  } else if (job.info.last_step().step() < job.info.total_steps()) {
    job.info.set_state(v1::JOB_STATE_STOPPED);
  } else {
    job.info.set_state(v1::JOB_STATE_FINISHED);
  }
  LogInfo("job ", id, ": ", v1::JobState_Name(job.info.state()));
  Persist(job);
  Changed(job);
}

void JobQueue::Changed(Job& job) { ++job.version; }

void JobQueue::Restarted(Job& job, int64_t first_step) {
  auto step_after = std::find_if(job.steps.begin(), job.steps.end(),
                                 [&](const v1::StepProgress& s) { return s.step() > first_step; });
  job.steps.erase(step_after, job.steps.end());
  job.evals.erase(std::remove_if(job.evals.begin(), job.evals.end(),
                                 [&](const v1::WatchEvent& e) { return EvalStep(e) > first_step; }),
                  job.evals.end());
  job.checkpoints.erase(
      std::remove_if(job.checkpoints.begin(), job.checkpoints.end(), [&](int64_t step) { return step > first_step; }),
      job.checkpoints.end());
  job.run_seconds = 0;  // the ETA is this run's pace
  ++job.restarts;
  job.restarted_from = first_step;
}

// job.json: the JobInfo (proto JSON) and what it takes to queue the job again.
const JobQueue::Job* JobQueue::FindLocked(const std::string& job_id) const {
  if (job_id.empty()) {
    if (!running_.empty()) return &jobs_.at(*running_.begin());
    return jobs_.empty() ? nullptr : &jobs_.rbegin()->second;
  }
  int64_t id = 0;
  if (!absl::SimpleAtoi(job_id, &id)) return nullptr;
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

v1::JobInfo JobQueue::InfoLocked(const Job& job) const {
  v1::JobInfo info = job.info;
  info.set_resumes_on_restart(job.interrupted && info.state() == v1::JOB_STATE_STOPPED);
  info.set_queue_position(0);
  if (info.state() == v1::JOB_STATE_QUEUED) {
    int64_t id = 0;
    (void)absl::SimpleAtoi(info.job_id(), &id);
    auto it = std::find(queue_.begin(), queue_.end(), id);
    // The head waits for the running jobs unless it joins them; the others wait for what is ahead.
    const std::string blocker = running_.empty() || queue_.empty() ? "" : JoinBlockerLocked(jobs_.at(queue_.front()));
    const int64_t ahead = it - queue_.begin();
    info.set_queue_position(static_cast<int32_t>(ahead) + (blocker.empty() ? 0 : 1));
    info.set_waiting_for(ahead == 0 ? blocker : absl::StrCat(ahead, ahead == 1 ? " job" : " jobs", " queued ahead"));
  }
  return info;
}

}  // namespace baton
