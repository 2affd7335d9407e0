// Fuzz target: a stage worker handling pushed envelopes (stage_worker/stage_runner.h), through its public API
// only. The input is what the coordinator and neighbours push: length-delimited baton.v1.Envelope messages
// (fuzz_util.h), one Push per header message. Each push is read with ReadEnvelope and handed to Deliver() as the
// gRPC handler does; then the worker runs step 0 (one micro-batch, forward and backward) on whatever arrived.
// Every outcome must be a status: an accepted step has one finite-or-not loss and a gradient per adapter, an
// error leaves the worker able to serve the next job (it is reconfigured for every input).
#include "core/lora/lora.h"
#include "core/model/flux2_weights.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "stage_worker/stage_runner.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"
#include "wire/envelope.h"

namespace baton::fuzz {
namespace {

class PushReader {
 public:
  PushReader(const std::vector<std::string>& messages, size_t begin, size_t end)
      : messages_(messages), next_(begin), end_(end) {}
  bool Read(v1::Envelope* message) { return next_ < end_ && message->ParseFromString(messages_[next_++]); }

 private:
  const std::vector<std::string>& messages_;
  size_t next_, end_;
};

struct Worker {
  Worker() : dir(test_util::MakeTempDir("stage_fuzz")) {
    Require(WriteRandomFlux2Weights(test_util::TinyFlux2Config(), dir, 2).ok(), "writing the tiny model");
    StageRunnerOptions options;
    options.address = "fuzz";
    options.wait_timeout = absl::Milliseconds(1);
    options.model_root = dir;  // the worker reads models only inside its --model_root
    runner = std::make_unique<StageRunner>(options);
  }
  ~Worker() { (void)RemoveAll(dir); }
  std::string dir;
  std::unique_ptr<StageRunner> runner;
};

Worker& TheWorker() {
  static Worker worker;
  return worker;
}

v1::StepPlan Plan() {
  v1::StepPlan plan;
  plan.set_job_id("job");
  plan.set_config_hash("hash");
  plan.set_step(0);
  plan.set_micro_batches(1);
  plan.set_loss_scale(1.0f);
  plan.add_actions()->set_type(v1::Action::FORWARD);
  plan.add_actions()->set_type(v1::Action::BACKWARD);
  return plan;
}

}  // namespace

v1::ConfigureRequest StageFuzzConfigure() {
  const Flux2Config config = test_util::TinyFlux2Config();
  v1::ConfigureRequest req;
  req.set_job_id("job");
  req.set_config_hash("hash");
  req.set_micro_batches(1);
  req.set_stage_index(0);
  req.set_num_stages(1);
  req.set_model_path(TheWorker().dir);
  req.set_block_begin(0);
  req.set_block_end(static_cast<int32_t>(config.num_blocks()));
  req.set_has_embedders(true);
  req.set_has_head(true);
  req.set_recompute(false);
  req.set_threads(1);
  req.mutable_lora()->set_rank(2);
  req.mutable_lora()->set_alpha(2);
  const absl::StatusOr<std::vector<std::string>> targets = ResolveLoraTargets("attention");
  Require(targets.ok(), "resolving the attention targets");
  for (const auto& t : *targets) req.mutable_lora()->add_targets(t);
  req.set_seed(5);
  return req;
}

bool RunStage(const uint8_t* data, size_t size) {
  StageRunner& runner = *TheWorker().runner;
  absl::StatusOr<v1::ConfigureResponse> configured = runner.Configure(StageFuzzConfigure());
  Require(configured.ok(), "configuring the tiny stage");
  const std::vector<std::string> messages = SplitDelimited(data, size, 1024);
  EnvelopeLimits limits;
  limits.max_tensor_bytes = uint64_t{1} << 20;
  limits.max_total_bytes = uint64_t{4} << 20;
  for (size_t begin = 0; begin < messages.size();) {
    // A push runs to the next message that parses as a header (the next Push's first message).
    size_t end = begin + 1;
    for (v1::Envelope m; end < messages.size() && !(m.ParseFromString(messages[end]) && m.has_header());) ++end;
    PushReader reader(messages, begin, end);
    absl::StatusOr<ReceivedEnvelope> envelope = ReadEnvelope(&reader, limits);
    if (envelope.ok()) (void)runner.Deliver(std::move(*envelope));
    begin = end;
  }
  size_t grads = 0;
  absl::StatusOr<v1::StepSummary> summary = runner.RunStep(
      Plan(), [] { return true; },
      [&](const std::string& name, const at::Tensor& grad) {
        Require(grad.device().is_cpu() && grad.scalar_type() == at::kFloat, "gradients are fp32 on the CPU");
        ++grads;
        return absl::OkStatus();
      });
  if (!summary.ok()) return false;
  Require(summary->losses_size() == 1, "one loss per micro-batch");
  Require(static_cast<int>(grads) == configured->lora_param_names_size(), "one gradient per adapter");
  return true;
}

}  // namespace baton::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  baton::fuzz::RunStage(data, size);
  return 0;
}
