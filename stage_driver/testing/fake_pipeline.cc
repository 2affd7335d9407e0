#include "stage_driver/testing/fake_pipeline.h"

#include <absl/strings/str_cat.h>

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

absl::StatusOr<std::unique_ptr<FakePipeline>> FakePipeline::Start(int stages, StageDriverOptions options) {
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
  p->fleet_.job_id = pipeline.id;
  p->fleet_.stall_timeout = options.stall_timeout;
  p->fleet_.outages.Configure(0, "", options.stall_timeout, nullptr);
  auto never = [] { return false; };
  p->stages_ = std::make_unique<StageSet>(pipeline, p->options_, std::move(plan), &p->fleet_, never);
  absl::Status started = p->stages_->Start();
  if (!started.ok()) return started;
  FakePipeline* raw = p.get();
  p->executor_ = std::make_unique<StepExecutor>(p->options_, &p->fleet_, p->stages_.get(), never,
                                                [raw](int64_t step, int stage, const std::string&) {
                                                  absl::MutexLock lock(&raw->mu_);
                                                  raw->recoveries_.emplace_back(step, stage);
                                                });
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
  for (const auto& names : fleet_.params) {
    for (const std::string& name : names) master[name] = at::zeros({4});
  }
  return master;
}

}  // namespace baton
