#include "stage_driver/testing/fake_pipeline.h"

#include <absl/strings/str_cat.h>

#include "core/util/status.h"
#include "rpc/tls.h"

namespace baton {

StageDriverOptions FakeDriverOptions() {
  StageDriverOptions options;
  options.step_retries = 3;
  options.stall_timeout = absl::Seconds(1);
  options.rpc_timeout = absl::Seconds(30);
  options.worker_restart_timeout = absl::Seconds(10);
  return options;
}

PipelineSpec FakePipelineSpec() {
  PipelineSpec pipeline;
  pipeline.id = "fake-pipeline";
  pipeline.name = "fake";
  pipeline.model = "/nonexistent/model";
  return pipeline;
}

absl::StatusOr<std::unique_ptr<FakeStageWorker>> StartFakeStage(int i) {
  return FakeStageWorker::Start({absl::StrCat("s", i, ".a"), absl::StrCat("s", i, ".b")});
}

std::vector<StageSpec> FakeStageSlice(int i, int stages) {
  StageSpec spec;
  spec.index = i;
  spec.block_begin = i;
  spec.block_end = i + 1;
  spec.has_embedders = i == 0;
  spec.has_head = i + 1 == stages;
  return {spec};
}

absl::StatusOr<std::unique_ptr<FakePipeline>> FakePipeline::Start(int stages, StageDriverOptions options,
                                                                  FleetSettings settings) {
  SetProcessSecurity(InsecureSecurity());  // remote workers need a transport; these are plaintext on loopback
  std::unique_ptr<FakePipeline> p(new FakePipeline());
  options.stages = stages;
  options.workers.clear();
  options.quiet = true;
  std::vector<std::vector<StageSpec>> plan;
  for (int i = 0; i < stages; ++i) {
    absl::StatusOr<std::unique_ptr<FakeStageWorker>> w = StartFakeStage(i);
    if (!w.ok()) return w.status();
    options.workers.push_back((*w)->address());
    p->workers_.push_back(std::move(*w));
    plan.push_back(FakeStageSlice(i, stages));
  }
  p->options_ = options;
  const PipelineSpec pipeline = FakePipelineSpec();
  settings.job_id = pipeline.id;
  settings.stall_timeout = options.stall_timeout;
  FakePipeline* raw = p.get();
  p->pipeline_ = std::make_unique<StagePipeline>(
      pipeline, p->options_, std::move(plan), std::move(settings), [] { return false; },
      [raw](int64_t step, int stage, const std::string&) {
        absl::MutexLock lock(&raw->mu_);
        raw->recoveries_.emplace_back(step, stage);
      });
  RETURN_IF_ERROR(p->pipeline_->Start());
  return p;
}

FakePipeline::~FakePipeline() = default;

std::vector<std::pair<int64_t, int>> FakePipeline::recoveries() const {
  absl::MutexLock lock(&mu_);
  return recoveries_;
}

StepSlice FakePipeline::Slice(int micro_batches) const {
  StepSlice slice;
  slice.schedule = *MakeSchedule(ScheduleKind::kGPipe, options_.stages, micro_batches);
  return slice;
}

StepInputs FakePipeline::Inputs(int micro_batches, const std::string& rope_key) {
  StepInputs in;
  for (int mb = 0; mb < micro_batches; ++mb) {
    MicroBatch batch;
    batch.index = mb;
    batch.target = at::zeros({1, 4, 2});
    in.micro_batches.push_back(batch);
    ShellOutputs shell;
    shell.inputs = {{"hidden_states", at::zeros({1, 4, 2})}};
    shell.constants = {{"temb", at::zeros({1, 2})}};
    shell.tables_key = rope_key;
    shell.tables = {{"cos", at::ones({4, 2})}, {"sin", at::zeros({4, 2})}};
    in.shell.push_back(shell);
  }
  return in;
}

std::map<std::string, at::Tensor> FakePipeline::Master() const {
  std::map<std::string, at::Tensor> master;
  for (int i = 0; i < pipeline_->size(); ++i) {
    for (const std::string& name : pipeline_->params(i)) master[name] = at::zeros({4});
  }
  return master;
}

}  // namespace baton
