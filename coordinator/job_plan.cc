#include "coordinator/job_plan.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cstdio>

#include "coordinator/encode_step.h"
#include "core/sample/sample_renderer.h"
#include "core/train/common.h"
#include "core/train/experts.h"
#include "core/util/status.h"
#include "stage_driver/configure_request.h"

namespace baton {

namespace {

// `stages` workers' schedule of the job, annotated as the job's other errors.
absl::StatusOr<Schedule> JobSchedule(const JobConfig& job, int stages) {
  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(job.schedule));
  const int chunks = kind == ScheduleKind::kInterleaved1F1B ? static_cast<int>(job.chunks) : 1;
  auto schedule = MakeSchedule(kind, stages, static_cast<int>(job.micro_batches), chunks);
  if (!schedule.ok()) {
    return Annotate(schedule.status(), absl::StrCat(job.source, ": schedule: ", job.schedule, " with micro_batches: ",
                                                    job.micro_batches, ", chunks: ", chunks, " on --stages ", stages));
  }
  return schedule;
}

// Every replica's plan, [replica][worker][chunk]: each replica planned for its own stages, devices and budgets
// (ReplicaJob). Printed for replica 0, and for each replica when their stage counts differ.
absl::StatusOr<std::vector<std::vector<std::vector<StageSpec>>>> PlanReplicas(const JobConfig& job,
                                                                              const StageDriverOptions& options,
                                                                              const ModelFamily& model,
                                                                              const CacheReader& cache,
                                                                              at::ScalarType dtype, bool quiet) {
  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(job.schedule));
  if (options.UnequalReplicas() && kind == ScheduleKind::kInterleaved1F1B) {
    return absl::InvalidArgumentError(absl::StrCat(job.source, ": replicas of different stage counts (",
                                                   absl::StrJoin(options.replica_stages, "+"),
                                                   ") need schedule: gpipe or 1f1b, not interleaved"));
  }
  const int chunks = kind == ScheduleKind::kInterleaved1F1B ? static_cast<int>(job.chunks) : 1;
  std::vector<std::vector<std::vector<StageSpec>>> plans;
  for (int r = 0; r < options.replicas; ++r) {
    const int stages = options.StagesOf(r);
    RETURN_IF_ERROR(JobSchedule(job, stages).status());
    const bool print = !quiet && (r == 0 || options.UnequalReplicas());
    if (print && options.UnequalReplicas()) std::printf("replica %d (%d stages):\n", r, stages);
    auto plan = PlanJobStages(ReplicaJob(job, options, r), model, cache, stages, chunks, dtype, !print,
                              /*remote_workers=*/!options.workers.empty());
    if (!plan.ok() && options.replicas > 1) return Annotate(plan.status(), absl::StrCat("replica ", r));
    if (!plan.ok()) return plan.status();
    plans.push_back(std::move(*plan));
  }
  return plans;
}

}  // namespace

absl::Status ApplyJobReplicas(const JobConfig& job, StageDriverOptions& options) {
  if (!job.replica_stages.empty()) {
    const std::vector<int> listed(job.replica_stages.begin(), job.replica_stages.end());
    if (!options.replica_stages.empty() && options.replica_stages != listed) {
      return absl::InvalidArgumentError(absl::StrCat("--workers groups replicas of ",
                                                     absl::StrJoin(options.replica_stages, "+"),
                                                     " stages, the job's replica_stages ", absl::StrJoin(listed, "+")));
    }
    const int count = static_cast<int>(listed.size());
    if (options.replicas != 0 && options.replicas != count) {
      return absl::InvalidArgumentError(
          absl::StrCat("--replicas ", options.replicas, " but the job's replica_stages lists ", count, " replicas"));
    }
    options.replica_stages = listed;
    options.replicas = count;
    options.stages = listed[0];
  }
  if (options.replicas == 0) options.replicas = static_cast<int>(job.replicas);
  if (job.replica_exchange == "allreduce" && options.UnequalReplicas()) {
    return absl::InvalidArgumentError(
        absl::StrCat(job.source,
                     ": replica_exchange: allreduce sums the gradients of matching stages, so its replicas need the "
                     "same stage count (here ",
                     options.replicas, " replicas of different stage counts)"));
  }
  return absl::OkStatus();
}

JobConfig WithConcreteExchange(const JobConfig& job, const StageDriverOptions& options) {
  JobConfig concrete = job;
  if (concrete.replica_exchange == "auto") {
    concrete.replica_exchange = options.UnequalReplicas() ? "coordinator" : "allreduce";
  }
  return concrete;
}

absl::Status CheckJobPlan(const JobConfig& job, int stages, std::string* frozen_key) {
  if (frozen_key != nullptr) frozen_key->clear();
  if (stages < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  StageDriverOptions options;
  options.stages = stages;
  options.replicas = 0;
  RETURN_IF_ERROR(ApplyJobReplicas(job, options));
  RETURN_IF_ERROR(CheckStageDriverOptions(options));
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(job.dtype));
  ASSIGN_OR_RETURN(std::unique_ptr<ModelFamily> model, OpenModel(job.model, job.model_config));
  RETURN_IF_ERROR(Annotate(CheckSamplesPossible(job, *model), job.source));
  RETURN_IF_ERROR(CheckLoraOutputsPossible(job, *model));
  if (!job.encode.encoder_worker.empty()) return absl::OkStatus();  // the cache is built at run time
  ASSIGN_OR_RETURN(auto cache, OpenTrainingCache(job, *model));
  ASSIGN_OR_RETURN(auto plans, PlanReplicas(job, options, *model, *cache, dtype, /*quiet=*/true));
  if (frozen_key == nullptr) return absl::OkStatus();
  // One expert's job runs its expert's transformer (another folder, the same shape: the same cut).
  JobConfig keyed = job;
  if (job.expert == "high" || job.expert == "low") {
    ASSIGN_OR_RETURN(std::vector<ExpertRun> runs, PlanExpertRuns(job, "", job.steps));
    keyed = runs.front().job;
  }
  *frozen_key = FrozenPipelineKey(PipelineSpecFor(keyed), plans.front());
  return absl::OkStatus();
}

absl::StatusOr<JobSetup> SetUpJob(const JobConfig& job, const CoordinatorOptions& options) {
  JobSetup s;
  s.micro_batches = static_cast<int>(job.micro_batches);
  ASSIGN_OR_RETURN(s.dtype, ParseDtype(job.dtype));
  ASSIGN_OR_RETURN(s.model, OpenModel(job.model, job.model_config));
  RETURN_IF_ERROR(CheckLoraOutputsPossible(job, *s.model));
  RETURN_IF_ERROR(RunEncodeStep(job, options.rpc_timeout, options.quiet).status());  // no `encode:`: nothing to do
  ASSIGN_OR_RETURN(s.cache, OpenTrainingCache(job, *s.model));
  const CacheReader& cache = *s.cache;
  ASSIGN_OR_RETURN(StepSampler sampler, StepSampler::Create(s.cache.get(), job, s.model.get()));
  s.sampler.emplace(std::move(sampler));
  ASSIGN_OR_RETURN(s.fingerprint, MakeJobFingerprint(job, s.model->WeightFiles(), cache.index()));
  ASSIGN_OR_RETURN(s.shell, s.model->BuildShell(s.dtype, at::kCPU));
  StageDriverOptions shape = options;  // as RunCoordinator settles it (callers may pass the options as given)
  RETURN_IF_ERROR(ApplyJobReplicas(job, shape));
  ASSIGN_OR_RETURN(s.schedule, JobSchedule(job, shape.StagesOf(0)));
  ASSIGN_OR_RETURN(s.plans, PlanReplicas(job, shape, *s.model, cache, s.dtype, options.quiet));
  return s;
}

}  // namespace baton
