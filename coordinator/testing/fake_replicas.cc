#include "coordinator/testing/fake_replicas.h"

#include <absl/strings/str_cat.h>

#include "rpc/tls.h"
#include "stage_driver/testing/fake_pipeline.h"

namespace baton {

absl::StatusOr<std::unique_ptr<FakeReplicas>> FakeReplicas::Start(int replicas, int stages, int micro_batches,
                                                                  bool local_optimizer) {
  SetProcessSecurity(InsecureSecurity());  // remote workers need a transport; these are plaintext on loopback
  std::unique_ptr<FakeReplicas> f(new FakeReplicas());
  f->options_ = FakeDriverOptions();
  f->options_.stages = stages;
  f->options_.replicas = replicas;
  f->options_.quiet = true;
  for (int r = 0; r < replicas; ++r) {
    std::vector<std::vector<StageSpec>> plan;
    for (int i = 0; i < stages; ++i) {
      absl::StatusOr<std::unique_ptr<FakeStageWorker>> w = StartFakeStage(i);
      if (!w.ok()) return w.status();
      f->options_.workers.push_back((*w)->address());
      f->workers_.push_back(std::move(*w));
      plan.push_back(FakeStageSlice(i, stages));
    }
    f->plans_.push_back(plan);
  }
  f->pipeline_ = FakePipelineSpec();
  ReplicaConfig config;
  config.schedule_kind = ScheduleKind::kGPipe;
  config.micro_batches = micro_batches;
  config.loss_scale = 1.0f / static_cast<float>(micro_batches);
  config.stall_timeout = f->options_.stall_timeout;
  config.split_by_speed = false;  // evenly: the tests know the split
  config.local_optimizer = local_optimizer;
  FakeReplicas* raw = f.get();
  f->set_ = std::make_unique<ReplicaSet>(
      f->pipeline_, f->options_, f->plans_, config, [] { return false; },
      [raw](int64_t step, int worker, const std::string&) {
        absl::MutexLock lock(&raw->mu_);
        raw->recoveries_.emplace_back(step, worker);
      });
  absl::Status started = f->set_->Start();
  if (!started.ok()) return started;
  return f;
}

FakeReplicas::~FakeReplicas() {
  if (set_) (void)set_->Stop();
}

std::vector<std::pair<int64_t, int>> FakeReplicas::recoveries() const {
  absl::MutexLock lock(&mu_);
  return recoveries_;
}

std::map<std::string, at::Tensor> FakeReplicas::Master() const {
  std::map<std::string, at::Tensor> master;
  for (int i = 0; i < options_.stages; ++i) {
    master[absl::StrCat("s", i, ".a")] = at::zeros({4});
    master[absl::StrCat("s", i, ".b")] = at::zeros({4});
  }
  return master;
}

absl::StatusOr<StepOutputs> FakeReplicas::Run(int64_t step, int micro_batches, bool reduce_when_held,
                                              SliceGuard* guard) {
  return set_->Run(step, FakePipeline::Inputs(micro_batches), Master(), guard, reduce_when_held);
}

}  // namespace baton
