#include "coordinator/job_plan.h"

#include <absl/strings/str_cat.h>

#include "coordinator/encode_step.h"
#include "core/sample/sample_renderer.h"
#include "core/train/common.h"
#include "core/util/status.h"

namespace baton {

absl::Status CheckJobPlan(const JobConfig& job, int stages) {
  if (stages < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(job.dtype));
  ASSIGN_OR_RETURN(std::unique_ptr<ModelFamily> model, OpenModel(job.model, job.model_config));
  RETURN_IF_ERROR(Annotate(CheckSamplesPossible(job, *model), job.source));
  if (!job.encode.encoder_worker.empty()) return absl::OkStatus();  // the cache is built at run time
  ASSIGN_OR_RETURN(auto cache, CacheReader::Open(job.dataset));
  RETURN_IF_ERROR(Annotate(model->CheckCacheFits(CacheContentsOf(cache->index())),
                           absl::StrCat("cache ", job.dataset, " does not fit the model")));
  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(job.schedule));
  const int chunks = kind == ScheduleKind::kInterleaved1F1B ? static_cast<int>(job.chunks) : 1;
  auto schedule = MakeSchedule(kind, stages, static_cast<int>(job.micro_batches), chunks);
  if (!schedule.ok()) {
    return Annotate(schedule.status(), absl::StrCat(job.source, ": schedule: ", job.schedule, " with micro_batches: ",
                                                    job.micro_batches, ", chunks: ", chunks, " on --stages ", stages));
  }
  return PlanStages(job, *model, *cache, stages, chunks, dtype, /*quiet=*/true).status();
}

absl::StatusOr<JobSetup> SetUpJob(const JobConfig& job, const CoordinatorOptions& options) {
  JobSetup s;
  const int p = options.stages;
  const int m = static_cast<int>(job.micro_batches);
  s.micro_batches = m;
  ASSIGN_OR_RETURN(s.dtype, ParseDtype(job.dtype));
  ASSIGN_OR_RETURN(s.model, OpenModel(job.model, job.model_config));
  RETURN_IF_ERROR(RunEncodeStep(job, options.rpc_timeout, options.quiet).status());  // no `encode:`: nothing to do
  ASSIGN_OR_RETURN(s.cache, CacheReader::Open(job.dataset));
  const CacheReader& cache = *s.cache;
  RETURN_IF_ERROR(Annotate(s.model->CheckCacheFits(CacheContentsOf(cache.index())),
                           absl::StrCat("cache ", job.dataset, " does not fit the model")));
  ASSIGN_OR_RETURN(StepSampler sampler, StepSampler::Create(s.cache.get(), job, s.model.get()));
  s.sampler.emplace(std::move(sampler));
  ASSIGN_OR_RETURN(s.fingerprint, MakeJobFingerprint(job, s.model->WeightFiles(), cache.index()));
  ASSIGN_OR_RETURN(s.shell, s.model->BuildShell(s.dtype, at::kCPU));
  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(job.schedule));
  const int chunks = kind == ScheduleKind::kInterleaved1F1B ? static_cast<int>(job.chunks) : 1;
  auto schedule = MakeSchedule(kind, p, m, chunks);
  if (!schedule.ok()) {
    return Annotate(schedule.status(), absl::StrCat(job.source, ": schedule: ", job.schedule, " with micro_batches: ",
                                                    m, ", chunks: ", chunks, " on --stages ", p));
  }
  s.schedule = std::move(*schedule);
  ASSIGN_OR_RETURN(s.plan, PlanStages(job, *s.model, cache, p, chunks, s.dtype, options.quiet,
                                      /*remote_workers=*/!options.workers.empty()));
  return s;
}

}  // namespace baton
