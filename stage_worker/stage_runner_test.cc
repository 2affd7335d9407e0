// StageRunner in-process (no gRPC): one stage holding the whole model must produce the gradients the
// single-process model produces, and bad input must be named, not crash or hang.
#include "stage_worker/stage_runner.h"

#include <gtest/gtest.h>

#include <mutex>

#include "core/lora/lora.h"
#include "core/model/flux2_ops.h"
#include "core/model/flux2_weights.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/util/files.h"

namespace baton {
namespace {

class StageRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::MakeTempDir("runner");
    config_ = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(config_, dir_, 2).ok());
    StageRunnerOptions opts;
    opts.address = "test";
    opts.wait_timeout = absl::Milliseconds(500);
    opts.heartbeat_interval = absl::Milliseconds(100);
    opts.model_root = dir_;
    runner_ = std::make_unique<StageRunner>(opts);
    v1::ConfigureRequest req;
    req.set_job_id("job");
    req.set_config_hash("hash");
    req.set_micro_batches(1);
    req.set_stage_index(0);
    req.set_num_stages(1);
    req.set_model_path(dir_);
    req.set_block_begin(0);
    req.set_block_end(static_cast<int32_t>(config_.num_blocks()));
    req.set_has_embedders(true);
    req.set_has_head(true);
    req.set_recompute(true);
    req.mutable_lora()->set_rank(2);
    req.mutable_lora()->set_alpha(2);
    auto targets = ResolveLoraTargets("attention");
    ASSERT_TRUE(targets.ok());
    for (const auto& t : *targets) req.mutable_lora()->add_targets(t);
    req.set_seed(5);
    req_ = req;
    auto resp = runner_->Configure(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ(resp->lora_param_names_size(), 2 * (8 * config_.num_layers + 2 * config_.num_single_layers));
  }

  void Deliver(v1::EnvelopeHeader::Kind kind, int mb, TensorMap tensors, uint64_t generation = 0) {
    absl::Status s = TryDeliver(kind, mb, std::move(tensors), generation);
    ASSERT_TRUE(s.ok()) << s;
  }
  absl::Status TryDeliver(v1::EnvelopeHeader::Kind kind, int mb, TensorMap tensors, uint64_t generation = 0) {
    ReceivedEnvelope e;
    e.header.set_generation(generation);
    e.header.set_job_id("job");
    e.header.set_config_hash("hash");
    e.header.set_step(0);
    e.header.set_micro_batch(mb);
    e.header.set_kind(kind);
    e.tensors = std::move(tensors);
    return runner_->Deliver(std::move(e));
  }
  // Step 0's envelopes for the fixture's job: the constants of `in` (RoPE included), its inputs and `target`, and
  // `lora` as the weights to use.
  void DeliverStep(const test_util::TinyInputs& in, const at::Tensor& target, const TensorMap& lora,
                   Flux2Constants* constants = nullptr) {
    auto ckpt = Flux2Checkpoint::Open(dir_);
    ASSERT_TRUE(ckpt.ok());
    auto shell = BuildFlux2Shell(**ckpt, at::kFloat, at::kCPU);
    ASSERT_TRUE(shell.ok());
    Flux2Constants k;
    {
      at::NoGradGuard no_grad;
      k = (*shell)(in.timestep, in.guidance, in.img_ids, in.txt_ids, at::kFloat);
    }
    ReceivedEnvelope rope;
    rope.header.set_kind(v1::EnvelopeHeader::ROPE);
    rope.header.set_job_id(req_.job_id());
    rope.header.set_config_hash(req_.config_hash());
    rope.header.set_generation(req_.generation());
    rope.tensors = RopeTensors(k, "key");
    ASSERT_TRUE(runner_->Deliver(std::move(rope)).ok());
    Deliver(v1::EnvelopeHeader::LORA_WEIGHTS, 0, lora, req_.generation());
    Deliver(v1::EnvelopeHeader::CONSTANTS, 0, ConstantTensors(k, "key"), req_.generation());
    Deliver(v1::EnvelopeHeader::INPUTS, 0, InputTensors(in.hidden_states, in.encoder_hidden_states), req_.generation());
    Deliver(v1::EnvelopeHeader::TARGET, 0, {{"target", target}}, req_.generation());
    if (constants != nullptr) *constants = k;
  }
  // A request the fixture's job would accept, for tests that change one field.
  v1::ConfigureRequest Request() {
    v1::ConfigureRequest req;
    req.set_job_id("job");
    req.set_config_hash("hash");
    req.set_num_stages(1);
    req.set_micro_batches(1);
    req.set_model_path(dir_);
    req.mutable_lora()->set_rank(2);
    req.mutable_lora()->set_alpha(2);
    return req;
  }

  v1::StepPlan Plan(int m) {
    v1::StepPlan plan;
    plan.set_job_id("job");
    plan.set_config_hash("hash");
    plan.set_step(0);
    plan.set_micro_batches(m);
    plan.set_loss_scale(1.0f / m);
    for (int i = 0; i < m; ++i) {
      auto* a = plan.add_actions();
      a->set_type(v1::Action::FORWARD);
      a->set_micro_batch(i);
      auto* b = plan.add_actions();
      b->set_type(v1::Action::BACKWARD);
      b->set_micro_batch(i);
    }
    return plan;
  }

  std::string dir_;
  v1::ConfigureRequest req_;
  Flux2Config config_;
  std::unique_ptr<StageRunner> runner_;
};

TEST_F(StageRunnerTest, OneStageStepMatchesInProcessGradients) {
  auto lora = runner_->CurrentLora("job", "hash");
  ASSERT_TRUE(lora.ok());
  // Non-zero B so every adapter gets a gradient.
  for (auto& [name, t] : *lora) t = t + 0.01;
  auto in = test_util::MakeTinyInputs(config_, 2, 2, 3, 4, 8);
  at::Tensor target = at::randn({2, 6, config_.in_channels});
  Flux2Constants k;
  DeliverStep(in, target, *lora, &k);
  TensorMap grads;
  auto summary = runner_->RunStep(Plan(1), nullptr, [&](const std::string& n, const at::Tensor& g) {
    grads[n] = g;
    return absl::OkStatus();
  });
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(summary->losses_size(), 1);
  auto ckpt = Flux2Checkpoint::Open(dir_);
  ASSERT_TRUE(ckpt.ok());

  // The same computation in one process.
  LoraSpec spec{2, 2.0, *ResolveLoraTargets("attention"), 0.0, 5};
  auto stage = BuildFlux2Stage(**ckpt, Flux2StageRange::Full(config_), at::kFloat, at::kCPU, &spec, true);
  ASSERT_TRUE(stage.ok());
  ASSERT_TRUE(AssignLoraParameters(**stage, *lora).ok());
  Flux2Activations a;
  a.img = in.hidden_states;
  a.txt = in.encoder_hidden_states;
  at::Tensor loss = FlowMatchingLoss((*stage)(a, k).output, target);
  EXPECT_NEAR(summary->losses(0), loss.item<double>(), 1e-6 * loss.item<double>());
  (loss * static_cast<double>(1.0f)).backward();
  auto expect = LoraGradients(**stage);
  ASSERT_EQ(grads.size(), expect.size());
  for (const auto& [name, g] : expect) EXPECT_TRUE(at::equal(grads.at(name), g)) << name;
}

// An exception out of a step's libtorch work (here the gradient hand-over running out of memory) fails the step with
// RESOURCE_EXHAUSTED while the heartbeat thread runs, instead of ending the worker (std::terminate).
TEST_F(StageRunnerTest, OutOfMemoryInAStepFailsTheStepNotTheWorker) {
  auto lora = runner_->CurrentLora("job", "hash");
  ASSERT_TRUE(lora.ok());
  auto in = test_util::MakeTinyInputs(config_, 2, 2, 3, 4, 8);
  at::Tensor target = at::randn({2, 6, config_.in_channels});
  Flux2Constants k;
  DeliverStep(in, target, *lora, &k);
  auto summary = runner_->RunStep(
      Plan(1), nullptr, [](const std::string&, const at::Tensor&) -> absl::Status { throw std::bad_alloc(); },
      [](const v1::StageHeartbeat&) {});
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kResourceExhausted) << summary.status();
  EXPECT_NE(summary.status().message().find("the step"), std::string::npos) << summary.status();
}

// A recovery's reconfigure (same model, a newer generation) drops what the aborted step left in the inbox and
// every late envelope of the older generation; the new generation's envelopes are taken.
TEST_F(StageRunnerTest, RecoveryReconfigureDropsTheAbortedStepsData) {
  auto in = test_util::MakeTinyInputs(config_, 2, 2, 3, 4, 8);
  const TensorMap inputs = InputTensors(in.hidden_states, in.encoder_hidden_states);
  Deliver(v1::EnvelopeHeader::INPUTS, 0, inputs);  // generation 0, left over
  v1::ConfigureRequest again = req_;
  again.set_generation(1);
  auto resp = runner_->Configure(again);
  ASSERT_TRUE(resp.ok()) << resp.status();
  Deliver(v1::EnvelopeHeader::INPUTS, 0, inputs, /*generation=*/0);  // late, from before the recovery
  auto noop = [](const std::string&, const at::Tensor&) { return absl::OkStatus(); };
  auto summary = runner_->RunStep(Plan(1), nullptr, noop);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find("no INPUTS for step 0"), std::string::npos) << summary.status();
  Deliver(v1::EnvelopeHeader::INPUTS, 0, inputs, /*generation=*/1);
  summary = runner_->RunStep(Plan(1), nullptr, noop);  // takes them, then waits for the weights
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find("no LORA_WEIGHTS for step 0"), std::string::npos) << summary.status();
}

// stage.proto's Configure contract: a request equal but for the neighbours and the generation keeps the adapters (a
// recovery); another run_id puts them back to their initial values; another job rebuilds the stage.
TEST_F(StageRunnerTest, ConfigureKeepsTheStageOnlyWithinARun) {
  const TensorMap initial = *runner_->CurrentLora("job", "hash");
  TensorMap trained;
  for (const auto& [name, t] : initial) trained[name] = t + 0.01;
  auto run_step_with = [&](const TensorMap& lora) {
    DeliverStep(test_util::MakeTinyInputs(config_, 2, 2, 3, 4, 8), at::randn({2, 6, config_.in_channels}), lora);
    auto summary =
        runner_->RunStep(Plan(1), nullptr, [](const std::string&, const at::Tensor&) { return absl::OkStatus(); });
    ASSERT_TRUE(summary.ok()) << summary.status();
  };
  auto expect_lora = [&](const TensorMap& want, const char* what) {
    auto got = runner_->CurrentLora(req_.job_id(), req_.config_hash());
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want.size()) << what;
    for (const auto& [name, t] : want) EXPECT_TRUE(at::equal(got->at(name), t)) << what << ": " << name;
  };
  run_step_with(trained);
  expect_lora(trained, "after the step");

  req_.set_generation(1);
  req_.set_next_address("");  // a recovery names its (new) neighbours; one stage has none
  ASSERT_TRUE(runner_->Configure(req_).ok());
  expect_lora(trained, "a recovery within the run");

  req_.set_run_id("run-2");
  ASSERT_TRUE(runner_->Configure(req_).ok());
  expect_lora(initial, "a new run");

  // The replica (its metrics' label) is part of what makes a stage the same (SameStage): another rebuilds it.
  run_step_with(trained);
  req_.set_replica(1);
  ASSERT_TRUE(runner_->Configure(req_).ok());
  expect_lora(initial, "another replica");

  run_step_with(trained);
  req_.set_job_id("job-2");
  req_.set_config_hash("hash-2");
  auto rebuilt = runner_->Configure(req_);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  expect_lora(initial, "another job");
}

// While a step waits, its heartbeat says for what and from whom (the coordinator's stall watch reads it).
TEST_F(StageRunnerTest, HeartbeatsSayWhatTheStepWaitsFor) {
  auto lora = runner_->CurrentLora("job", "hash");
  ASSERT_TRUE(lora.ok());
  Deliver(v1::EnvelopeHeader::LORA_WEIGHTS, 0, *lora);
  std::vector<v1::StageHeartbeat> beats;
  std::mutex mu;
  auto summary = runner_->RunStep(
      Plan(1), nullptr, [](const std::string&, const at::Tensor&) { return absl::OkStatus(); },
      [&](const v1::StageHeartbeat& beat) {
        std::lock_guard<std::mutex> lock(mu);
        beats.push_back(beat);
      });
  ASSERT_FALSE(summary.ok());  // no INPUTS: a 500 ms wait, about 4 heartbeats
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(beats.size(), 2u);
  EXPECT_NE(beats.back().activity().find("waiting for INPUTS of step 0 micro-batch 0 from the coordinator"),
            std::string::npos)
      << beats.back().activity();
  EXPECT_EQ(beats.back().waiting_on(), -1);
  EXPECT_GT(beats.back().activity_seconds(), 0.1);
}

TEST_F(StageRunnerTest, MissingDataIsANamedTimeoutNotAHang) {
  auto lora = runner_->CurrentLora("job", "hash");
  ASSERT_TRUE(lora.ok());
  Deliver(v1::EnvelopeHeader::LORA_WEIGHTS, 0, *lora);
  auto summary =
      runner_->RunStep(Plan(1), nullptr, [](const std::string&, const at::Tensor&) { return absl::OkStatus(); });
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(summary.status().message().find("no INPUTS for step 0 micro-batch 0 from the coordinator"),
            std::string::npos)
      << summary.status();
}

TEST_F(StageRunnerTest, MalformedConstantsAreRejectedWithTheReason) {
  auto lora = runner_->CurrentLora("job", "hash");
  ASSERT_TRUE(lora.ok());
  Deliver(v1::EnvelopeHeader::LORA_WEIGHTS, 0, *lora);
  auto in = test_util::MakeTinyInputs(config_, 1, 2, 2, 3, 8);
  Deliver(v1::EnvelopeHeader::INPUTS, 0, InputTensors(in.hidden_states, in.encoder_hidden_states));
  TensorMap bad = {{"mod_img", at::zeros({1, 5})},
                   {"mod_txt", at::zeros({1, 96})},
                   {"mod_single", at::zeros({1, 48})},
                   {"mod_out", at::zeros({1, 32})},
                   {"rope_key/k", at::empty({0})}};
  // Refused at the door (the push), before it reaches the inbox.
  absl::Status refused_push = TryDeliver(v1::EnvelopeHeader::CONSTANTS, 0, bad);
  EXPECT_EQ(refused_push.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused_push.message().find("'mod_img' has shape [1, 5], last dimension must be 96"), std::string::npos)
      << refused_push;
  // The runner keeps serving: a wrong job id is refused cleanly.
  v1::StepPlan other = Plan(1);
  other.set_job_id("other");
  auto refused =
      runner_->RunStep(other, nullptr, [](const std::string&, const at::Tensor&) { return absl::OkStatus(); });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StageRunnerTest, ConfigureRejectsABadBlockRange) {
  v1::ConfigureRequest req = Request();
  req.set_block_begin(3);
  req.set_block_end(99);
  auto resp = runner_->Configure(req);
  ASSERT_FALSE(resp.ok());
  EXPECT_NE(resp.status().message().find("block range [3, 99)"), std::string::npos) << resp.status();
  // A request refused by its checks leaves the running job as it was (stage.proto's Configure).
  EXPECT_TRUE(runner_->CurrentLora("job", "hash").ok());
}

// A request that passes its checks but whose stage fails to load (a config naming one single-stream block more than
// the weights hold: found missing only while the blocks load) has already dropped the running stage to make room for
// the new one: the worker is unconfigured until a Configure succeeds (stage.proto's Configure says so).
TEST_F(StageRunnerTest, AConfigureThatFailsWhileLoadingLeavesTheWorkerUnconfigured) {
  const std::string more = JoinPath(dir_, "more");
  ASSERT_TRUE(MakeDirs(more).ok());
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    if (entry.is_regular_file())
      std::filesystem::copy_file(entry.path(), JoinPath(more, entry.path().filename().string()));
  }
  auto config = ReadFile(JoinPath(more, "config.json"));
  ASSERT_TRUE(config.ok());
  const std::string layers = absl::StrCat("\"num_single_layers\": ", config_.num_single_layers);
  ASSERT_NE(config->find(layers), std::string::npos) << *config;
  config->replace(config->find(layers), layers.size(),
                  absl::StrCat("\"num_single_layers\": ", config_.num_single_layers + 1));
  ASSERT_TRUE(WriteFileAtomic(JoinPath(more, "config.json"), *config).ok());
  v1::ConfigureRequest req = req_;
  req.set_model_path(more);
  req.set_block_end(static_cast<int32_t>(config_.num_blocks()) + 1);
  auto resp = runner_->Configure(req);
  ASSERT_FALSE(resp.ok());
  EXPECT_NE(resp.status().message().find("single_transformer_blocks"), std::string::npos) << resp.status();
  auto lora = runner_->CurrentLora("job", "hash");
  EXPECT_EQ(lora.status().code(), absl::StatusCode::kFailedPrecondition) << lora.status();
  EXPECT_NE(lora.status().message().find("not configured"), std::string::npos) << lora.status();
  ASSERT_TRUE(runner_->Configure(req_).ok());
  EXPECT_TRUE(runner_->CurrentLora("job", "hash").ok());
}

TEST_F(StageRunnerTest, ConfigureRejectsChunksWithNowhereToSend) {
  v1::ConfigureRequest req = Request();
  v1::StageChunk* first = req.add_chunks();
  first->set_block_begin(0);
  first->set_block_end(2);
  first->set_has_embedders(true);
  v1::StageChunk* second = req.add_chunks();
  second->set_block_begin(2);
  second->set_block_end(static_cast<int32_t>(config_.num_blocks()));
  second->set_has_head(true);
  auto resp = runner_->Configure(req);
  ASSERT_FALSE(resp.ok());
  EXPECT_NE(resp.status().message().find("chunk 0 has no head but next_address is empty"), std::string::npos)
      << resp.status();
  req.set_next_address("127.0.0.1:1");
  resp = runner_->Configure(req);
  ASSERT_FALSE(resp.ok());
  EXPECT_NE(resp.status().message().find("chunk 1 has no embedders but prev_address is empty"), std::string::npos)
      << resp.status();
  second->set_block_end(99);
  resp = runner_->Configure(req);
  ASSERT_FALSE(resp.ok());
  EXPECT_NE(resp.status().message().find("block range of chunk 1 [2, 99)"), std::string::npos) << resp.status();
}

}  // namespace
}  // namespace baton
