// A pipeline of fake stage workers (fake_stage_worker.h) driven as remote workers by the driver's real StagePipeline
// (its StageFleet and StageSet), all in the test's process: what the driver's unit tests run a step, a pass or a
// recovery on. Stage i holds the LoRA parameters "s<i>.a" and "s<i>.b".
#pragma once

#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>

#include <memory>
#include <utility>
#include <vector>

#include "stage_driver/stage_pipeline.h"
#include "stage_driver/testing/fake_stage_worker.h"

namespace baton {

// The timeouts the fake-backed tests run with: a 1 s stall, 30 s RPCs, 10 s for a worker to come back, 3 retries.
StageDriverOptions FakeDriverOptions();
// The pipeline the fake stages hold ("fake-pipeline"; no model: the fakes load none).
PipelineSpec FakePipelineSpec();
// Fake stage `i` of a pipeline: it holds "s<i>.a" and "s<i>.b".
absl::StatusOr<std::unique_ptr<FakeStageWorker>> StartFakeStage(int i);
// Worker i's slice of a fake pipeline of `stages`: block i, the embedders on worker 0, the head on the last.
std::vector<StageSpec> FakeStageSlice(int i, int stages);

class FakePipeline {
 public:
  // `stages` fake workers, connected and configured. `options`: timeouts and retries (workers are filled in);
  // `settings`: what the steps carry (the job id and stall timeout are the fake's and the options').
  static absl::StatusOr<std::unique_ptr<FakePipeline>> Start(int stages, StageDriverOptions options = {},
                                                             FleetSettings settings = {});
  ~FakePipeline();

  FakeStageWorker& worker(int i) { return *workers_[i]; }
  StagePipeline& pipeline() { return *pipeline_; }
  StageFleet& fleet() { return pipeline_->fleet_for_testing(); }
  StageSet& stages() { return pipeline_->stages_for_testing(); }
  const StageDriverOptions& options() const { return options_; }
  // The recoveries the pipeline began: (step, stage blamed).
  std::vector<std::pair<int64_t, int>> recoveries() const ABSL_LOCKS_EXCLUDED(mu_);

  // A whole step of `micro_batches` under GPipe.
  StepSlice Slice(int micro_batches) const;
  // `micro_batches` micro-batches of tiny tensors, all sharing one RoPE key.
  static StepInputs Inputs(int micro_batches, const std::string& rope_key = "grid-2x2");
  // Every stage's adapters (zeros), by name.
  std::map<std::string, at::Tensor> Master() const;

 private:
  FakePipeline() = default;

  std::vector<std::unique_ptr<FakeStageWorker>> workers_;
  StageDriverOptions options_;
  std::unique_ptr<StagePipeline> pipeline_;
  mutable absl::Mutex mu_;
  std::vector<std::pair<int64_t, int>> recoveries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton
