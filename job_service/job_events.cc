// The queue's side of each run it starts: the hooks that carry a run's start, steps, evaluations and outages into
// its job's record (and on to the service's watchers).
#include <absl/strings/str_cat.h>

#include "core/util/log.h"
#include "job_service/job_queue.h"

namespace baton {
namespace {

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
      job.frozen_key = start.frozen_key;
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
    s->set_busy_seconds(BusySeconds(rec.stages[i]));
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

}  // namespace baton
