// A Denoiser (core/sample/denoiser.h) over the stage workers: validation and sample images during a pipeline run.
// Each call's micro-batches go through the frozen shell in this process, then through the stages as forward-only
// passes (StagePipeline::RunForwardPass) of at most the job's micro_batches each, with the adapters in `master`.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/model/model_family.h"
#include "core/sample/denoiser.h"
#include "stage_driver/stage_pipeline.h"

namespace baton {

class StageDenoiser {
 public:
  // Everything must outlive the denoiser; `master` is read at each call (the current adapters).
  // `micro_batches`: the most a pass carries (the stages were configured for it).
  StageDenoiser(const ModelFamily& model, ShellModel& shell, at::ScalarType dtype, int micro_batches,
                StagePipeline& pipeline, const std::map<std::string, at::Tensor>& master);

  // The training step the next passes follow (their messages name it).
  void set_step(int64_t step) { step_ = step; }
  // The pipeline the next passes run on (a replica that is not being recovered).
  void set_pipeline(StagePipeline& pipeline) { pipeline_ = &pipeline; }
  Denoiser AsDenoiser();
  // The same passes with other adapters than `master` (the EMA's), read at each call; `adapters` must outlive it.
  Denoiser With(const std::map<std::string, at::Tensor>& adapters);

 private:
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<NoisyBatch>& batches,
                                              const std::map<std::string, at::Tensor>& adapters);

  const ModelFamily& model_;
  ShellModel& shell_;
  at::ScalarType dtype_;
  int micro_batches_;
  StagePipeline* pipeline_;
  const std::map<std::string, at::Tensor>& master_;
  int64_t step_ = 0;
  uint64_t next_pass_ = 1;  // passes are numbered 1, 2, ... through the run
};

}  // namespace baton
