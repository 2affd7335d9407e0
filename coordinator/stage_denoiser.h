// A Denoiser (core/sample/denoiser.h) over the stage workers: validation and sample images during a pipeline run.
// Each call's micro-batches go through the coordinator's frozen shell, then through the stages as forward-only
// passes (StepExecutor::RunForwardPass) of at most the job's micro_batches each, with the adapters in `master`.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "coordinator/job_plan.h"
#include "coordinator/step_executor.h"
#include "core/sample/denoiser.h"

namespace baton {

class StageDenoiser {
 public:
  // Everything must outlive the denoiser; `master` is read at each call (the current adapters).
  StageDenoiser(JobSetup& setup, StepExecutor& executor, const std::map<std::string, at::Tensor>& master);

  // The training step the next passes follow (their messages name it).
  void set_step(int64_t step) { step_ = step; }
  Denoiser AsDenoiser();

 private:
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<NoisyBatch>& batches);

  JobSetup& setup_;
  StepExecutor& executor_;
  const std::map<std::string, at::Tensor>& master_;
  int64_t step_ = 0;
  uint64_t next_pass_ = 1;  // passes are numbered 1, 2, ... through the run
};

}  // namespace baton
