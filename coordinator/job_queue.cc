#include "coordinator/job_queue.h"

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

namespace baton {
namespace {

double NowUnix() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

bool Ended(v1::JobState s) { return s >= v1::JOB_STATE_FINISHED; }

v1::WatchEvent ValidationEvent(int64_t step, const ValidationResult& result, bool ema) {
  v1::WatchEvent event;
  v1::ValidationProgress* v = event.mutable_validation();
  v->set_step(step);
  v->mutable_timesteps()->Assign(result.timesteps.begin(), result.timesteps.end());
  v->mutable_losses()->Assign(result.losses.begin(), result.losses.end());
  v->set_mean(result.mean);
  v->set_ema(ema);
  return event;
}

}  // namespace

int64_t EvalStep(const v1::WatchEvent& e) { return e.has_validation() ? e.validation().step() : e.samples().step(); }

JobQueue::JobQueue(CoordinatorOptions base, std::string output_root, std::string data_root)
    : base_(std::move(base)), root_(std::move(output_root)), data_root_(std::move(data_root)) {}

JobQueue::~JobQueue() { Shutdown(); }

absl::Status JobQueue::Start() {
  RETURN_IF_ERROR(MakeDirs(root_));
  RETURN_IF_ERROR(Reload());
  runner_ = std::thread([this] { RunnerMain(); });
  return absl::OkStatus();
}

absl::StatusOr<v1::JobInfo> JobQueue::Submit(const SubmittedJob& submitted) {
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
  for (const auto& [one, job] : jobs) RETURN_IF_ERROR(ValidateSubmittedJob(one, job, base_.stages, data_root_));
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("the coordinator is shutting down");
  const v1::JobInfo first = EnqueueLocked(std::move(jobs[0].first), std::move(jobs[0].second));
  for (size_t i = 1; i < jobs.size(); ++i) EnqueueLocked(std::move(jobs[i].first), std::move(jobs[i].second));
  return first;
}

v1::JobInfo JobQueue::EnqueueLocked(SubmittedJob submitted, JobConfig config) {
  const int64_t id = next_id_++;
  Job& job = jobs_[id];
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

absl::StatusOr<JobUpdate> JobQueue::WaitForUpdate(const std::string& job_id, uint64_t seen_version,
                                                  const WatchCursor& cursor, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  std::string id = job_id;
  if (id.empty()) {
    if (running_.empty() && queue_.empty()) return absl::NotFoundError("no job is running or queued");
    id = absl::StrCat(!running_.empty() ? *running_.begin() : queue_.front());
  }
  const Job* job = FindLocked(id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job ", id));
  auto changed = [&] { return job->version != seen_version; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  JobUpdate update;
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

namespace {

// What two jobs must share to run side by side on the same stage workers: the frozen weights (model, config,
// expert, precision, 8-bit storage) and the cut's inputs (schedule chunks, replicas; stages are the service's).
std::string ShareKey(const JobConfig& job) {
  return absl::StrCat(job.model, "|", job.model_config, "|", job.expert, "|", job.dtype, "|", job.quantize, "|",
                      job.chunks, "|", job.replicas, "|", absl::StrJoin(job.devices, ","));
}

// Whether the job's stage workers may hold other jobs beside it: one replica (the job's, and the service's
// --replicas, 0 meaning the job's), one expert.
bool Shareable(const JobConfig& job, int service_replicas) {
  return job.replicas == 1 && job.replica_stages.empty() && service_replicas <= 1 && job.expert != "both";
}

// The job's memory budget of stage s in bytes (0: none).
int64_t BudgetBytes(const JobConfig& job, size_t s) {
  if (job.memory_per_stage.empty()) return 0;
  const std::string& text = job.memory_per_stage.size() == 1 ? job.memory_per_stage[0] : job.memory_per_stage[s];
  return ParseByteSize(text).value_or(0);
}

}  // namespace

std::string JobQueue::JoinBlockerLocked(const Job& next) const {
  const Job& first = jobs_.at(*running_.begin());
  const std::string running = absl::StrCat(running_.size() > 1 ? "jobs " : "job ", absl::StrJoin(running_, ", "));
  if (!Shareable(next.config, base_.replicas) || !Shareable(first.config, base_.replicas)) {
    return absl::StrCat(running, " (replicas and both experts run alone)");
  }
  if (running_.size() >= kMaxSweepMembers) return absl::StrCat(kMaxSweepMembers, " jobs already share the stages");
  if (ShareKey(next.config) != ShareKey(first.config)) {
    return absl::StrCat(running, " (another model, precision or cut on the stage workers)");
  }
  // Memory: the frozen stage once, every running job's share, and the newcomer's (as large as the largest running
  // one's: the same model; its own plan exists only once it starts), within the smallest budget any of them sets.
  const size_t stages = first.planned_bytes.size();
  for (int64_t id : running_) {
    const Job& job = jobs_.at(id);
    if (job.planned_bytes.empty() || job.planned_bytes.size() != stages) {
      return absl::StrCat("job ", id, " to start (its memory plan)");
    }
  }
  for (size_t s = 0; s < stages; ++s) {
    int64_t budget = BudgetBytes(next.config, s), need = first.planned_bytes[s] - first.member_bytes[s], largest = 0;
    for (int64_t id : running_) {
      const Job& job = jobs_.at(id);
      const int64_t b = BudgetBytes(job.config, s);
      if (b > 0) budget = budget > 0 ? std::min(budget, b) : b;
      need += job.member_bytes[s];
      largest = std::max(largest, job.member_bytes[s]);
    }
    if (budget > 0 && need + largest > budget) {
      return absl::StrCat(running, " (stage ", s, " would need ", FormatByteSize(need + largest),
                          " with this job, over its memory budget of ", FormatByteSize(budget), ")");
    }
  }
  return "";
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
CoordinatorHooks JobQueue::HooksFor(int64_t id) {
  const CoordinatorHooks& base = base_.hooks;
  CoordinatorHooks hooks;
  absl::MutexLock lock(&mu_);
  hooks.stop = jobs_.at(id).stop.get();
  hooks.on_start = [this, id, next = base.on_start](const RunStart& start) {
    {
      absl::MutexLock lock(&mu_);
      Job& job = jobs_.at(id);
      Restarted(job, start.first_step);
      job.info.set_first_step(start.first_step);
      job.info.set_total_steps(start.total_steps);
      job.info.mutable_stage_addresses()->Assign(start.addresses.begin(), start.addresses.end());
      job.info.mutable_stage_planned_bytes()->Assign(start.planned_bytes.begin(), start.planned_bytes.end());
      job.planned_bytes = start.planned_bytes;
      job.member_bytes = start.member_bytes;
      Changed(job);
    }
    if (next) next(start);
  };
  hooks.on_step = [this, id, next = base.on_step](const PipelineStepRecord& rec) {
    OnStep(id, rec);
    if (next) next(rec);
  };
  hooks.on_checkpoint = [this, id, next = base.on_checkpoint](int64_t step, double seconds) {
    {
      absl::MutexLock lock(&mu_);
      Job& job = jobs_.at(id);
      job.info.set_last_checkpoint_step(step);
      job.checkpoints.push_back(step);
      Persist(job);  // job.json then knows how far the job got, should the service die (SIGKILL) before it ends
      Changed(job);
    }
    if (next) next(step, seconds);
  };
  hooks.on_eval = [this, id, next = base.on_eval](const EvalReport& report) {
    OnEval(id, report);
    if (next) next(report);
  };
  hooks.on_outage = [this, id, next = base.on_outage](const StageOutage& outage) {
    OnOutage(id, outage);
    if (next) next(outage);
  };
  return hooks;
}

// Notices only (the refreshes between them are the metric's): the job's current outages, and an event for watchers.
void JobQueue::OnOutage(int64_t id, const StageOutage& outage) {
  if (!outage.notice) return;
  constexpr size_t kKeptOutages = 256;  // a link that flaps for days must not grow the job without bound
  v1::StageOutage o;
  o.set_stage(outage.worker);
  o.set_name(outage.name);
  o.set_seconds(outage.seconds);
  o.set_over(outage.over);
  o.set_message(outage.message);
  o.set_time_unix(NowUnix());
  absl::MutexLock lock(&mu_);
  Job& job = jobs_.at(id);
  auto* now = job.info.mutable_outages();
  now->erase(std::remove_if(now->begin(), now->end(), [&](const v1::StageOutage& x) { return x.stage() == o.stage(); }),
             now->end());
  if (!o.over()) *now->Add() = o;
  v1::WatchEvent event;
  *event.mutable_outage() = std::move(o);
  job.outages.push_back(std::move(event));
  ++job.outage_count;
  if (job.outages.size() > kKeptOutages) job.outages.pop_front();
  Changed(job);
}

void JobQueue::OnEval(int64_t id, const EvalReport& report) {
  absl::MutexLock lock(&mu_);
  Job& job = jobs_.at(id);
  if (report.validation) {
    job.evals.push_back(ValidationEvent(report.step, *report.validation, /*ema=*/false));
    *job.info.mutable_last_validation() = job.evals.back().validation();
  }
  if (report.ema_validation) {  // the EMA's, beside the trained adapters' (ema.evals: both)
    job.evals.push_back(ValidationEvent(report.step, *report.ema_validation, /*ema=*/true));
  }
  if (report.samples) {
    v1::WatchEvent event;
    v1::SamplesProgress* p = event.mutable_samples();
    p->set_step(report.step);
    p->set_images(report.samples->images);
    p->set_seconds_per_sample(report.samples->seconds_per_sample);
    p->set_contact_sheet(report.samples->contact_sheet);
    *job.info.mutable_last_samples() = *p;
    job.evals.push_back(std::move(event));
  }
  Changed(job);
}

void JobQueue::OnStep(int64_t id, const PipelineStepRecord& rec) {
  absl::MutexLock lock(&mu_);
  Job& job = jobs_.at(id);
  job.run_seconds += rec.step_seconds;
  const int64_t done = rec.step - job.info.first_step();
  v1::StepProgress p;
  p.set_step(rec.step);
  p.set_total_steps(job.info.total_steps());
  p.set_loss(rec.loss);
  p.set_learning_rate(rec.lr);
  p.set_grad_norm(rec.grad_norm);
  p.set_step_seconds(rec.step_seconds);
  p.set_samples_per_second(rec.samples_per_second);
  p.set_link_bytes(static_cast<int64_t>(rec.link_data_bytes + rec.link_adapter_bytes + rec.link_control_bytes +
                                        rec.link_heartbeat_bytes));
  p.set_eta_seconds(done > 0 ? job.run_seconds / static_cast<double>(done) *
                                   static_cast<double>(job.info.total_steps() - rec.step)
                             : 0);
  while (job.info.stage_totals_size() < static_cast<int>(rec.stages.size())) job.info.add_stage_totals();
  for (size_t i = 0; i < rec.stages.size(); ++i) {
    v1::StageStats* s = p.add_stages();
    s->set_busy_seconds(rec.stages[i].forward_seconds + rec.stages[i].backward_seconds);
    s->set_idle_seconds(rec.stages[i].idle_seconds);
    s->set_memory_bytes(static_cast<int64_t>(rec.stages[i].memory_bytes));
    v1::StageStats* total = job.info.mutable_stage_totals(static_cast<int>(i));
    total->set_busy_seconds(total->busy_seconds() + s->busy_seconds());
    total->set_idle_seconds(total->idle_seconds() + s->idle_seconds());
  }
  if (rec.replica_micro_batches.size() > 1) {
    for (size_t r = 0; r < rec.replica_micro_batches.size(); ++r) {
      p.add_replica_micro_batches(rec.replica_micro_batches[r]);
      p.add_replica_samples_per_second(r < rec.replica_samples_per_second.size() ? rec.replica_samples_per_second[r]
                                                                                 : 0.0);
    }
  }
  *job.info.mutable_last_step() = p;
  job.steps.push_back(std::move(p));
  Changed(job);
}

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
}

// job.json: the JobInfo (proto JSON) and what it takes to queue the job again.
void JobQueue::Persist(const Job& job) const {
  std::string info_json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(job.info, &info_json, opts);
  nlohmann::json j = {{"info", nlohmann::json::parse(info_json)},
                      {"yaml", job.submitted.yaml},
                      {"working_dir", job.submitted.working_dir},
                      {"steps", job.submitted.steps},
                      {"sweep_member", job.submitted.sweep_member},
                      {"resume", job.info.state() == v1::JOB_STATE_QUEUED
                                     ? job.resume
                                     : job.interrupted && job.info.state() == v1::JOB_STATE_STOPPED}};
  absl::Status s = MakeDirs(job.info.output_dir());
  if (s.ok()) s = WriteFileAtomic(JoinPath(job.info.output_dir(), "job.json"), j.dump(1));
  if (!s.ok()) LogWarning("job ", job.info.job_id(), ": cannot record its state: ", s.ToString());
}

absl::Status JobQueue::Reload() {
  std::error_code ec;
  std::vector<std::pair<int64_t, Job>> found;
  for (const auto& entry : std::filesystem::directory_iterator(root_, ec)) {
    const std::string path = JoinPath(entry.path().string(), "job.json");
    if (!PathExists(path)) continue;
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    auto j = nlohmann::json::parse(text, nullptr, false);
    Job job;
    if (j.is_discarded() || !google::protobuf::util::JsonStringToMessage(j["info"].dump(), &job.info).ok()) {
      LogWarning("skipping unreadable ", path);
      continue;
    }
    job.submitted = {j["yaml"].get<std::string>(),        job.info.job_file(),
                     j["working_dir"].get<std::string>(), job.info.name(),
                     j["steps"].get<int64_t>(),           j.value("sweep_member", "")};
    job.resume = j.value("resume", false);
    LoggedHistory logged =
        ReadTrainLogHistory(JoinPath(job.info.output_dir(), "train_log.jsonl"), job.info.total_steps());
    job.steps = std::move(logged.steps);
    job.evals = std::move(logged.evals);
    job.run_seconds = logged.run_seconds;
    auto checkpoints = ListCheckpointSteps(job.info.output_dir());
    if (checkpoints.ok()) job.checkpoints = *checkpoints;
    int64_t id = 0;
    if (!absl::SimpleAtoi(job.info.job_id(), &id)) continue;
    found.emplace_back(id, std::move(job));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  absl::MutexLock lock(&mu_);
  for (auto& [id, job] : found) {
    next_id_ = std::max(next_id_, id + 1);
    // A job the service was running when it died (SIGKILL, a crash, the host) resumes from its newest checkpoint,
    // as one a SIGTERM stopped does; with none yet it starts over (resume_if_any).
    const bool died_running = job.info.state() == v1::JOB_STATE_RUNNING;
    if (died_running) {
      job.resume = true;
      if (job.info.has_last_step()) {
        LogWarning("job ", id, ": the service exited while it ran (at step ", job.info.last_step().step(),
                   ", last checkpoint: step ", job.info.last_checkpoint_step(), "); resuming it");
      } else {  // admitted, but still loading or waiting for its turn on shared workers: nothing ran yet
        LogWarning("job ", id, ": the service exited while the job was starting (no step done yet); starting it again");
      }
    }
    job.info.clear_outages();  // as of the last checkpoint: long over or moot
    if (died_running || job.info.state() == v1::JOB_STATE_QUEUED ||
        (job.resume && job.info.state() == v1::JOB_STATE_STOPPED)) {
      job.info.set_state(v1::JOB_STATE_QUEUED);
      job.info.set_end_time_unix(0);
      auto config = ParseSubmittedJob(job.submitted);
      if (config.ok()) {
        job.config = *config;
        queue_.push_back(id);
      } else {
        job.info.set_state(v1::JOB_STATE_FAILED);
        job.info.set_error(config.status().ToString());
      }
    }
    Persist(job);
    jobs_[id] = std::move(job);
  }
  return absl::OkStatus();
}

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
