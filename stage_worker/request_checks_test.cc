// The pure request checks (request_checks.h): every refusal with its code, and what passes.
#include "stage_worker/request_checks.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/model/flux2_family.h"
#include "core/model/stage_io.h"
#include "core/testing/tiny_flux2.h"

namespace baton {
namespace {

using Kind = v1::EnvelopeHeader;

class RequestChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    e_.job_id = "job";
    e_.config_hash = "hash";
    e_.micro_batches = 2;
    e_.num_chunks = 1;
    e_.takes_target = true;
    e_.takes_activation = true;
    e_.model = std::make_shared<Flux2Family>(config_, nullptr);
    e_.lora_shapes = {{"a.lora_A.weight", {2, 16}}};
    e_.current_step = 5;
  }
  const Flux2Config config_ = test_util::TinyFlux2Config();
  v1::EnvelopeHeader Header(Kind::Kind kind, int64_t step = 5, int mb = 0) const {
    v1::EnvelopeHeader h;
    h.set_job_id("job");
    h.set_config_hash("hash");
    h.set_kind(kind);
    h.set_step(step);
    h.set_micro_batch(mb);
    return h;
  }
  absl::StatusCode Code(const v1::EnvelopeHeader& h, TensorMap t) const {
    ReceivedEnvelope envelope;
    envelope.header = h;
    envelope.tensors = std::move(t);
    return CheckEnvelope(e_, envelope).code();
  }
  TensorMap Target(int64_t width) const { return {{"target", at::zeros({1, 6, width})}}; }
  ExpectedStageIO e_;
};

TEST_F(RequestChecksTest, JobAndConfigHashMustMatch) {
  const int64_t w = config_.out_dim();
  EXPECT_EQ(Code(Header(Kind::TARGET), Target(w)), absl::StatusCode::kOk);
  v1::EnvelopeHeader h = Header(Kind::TARGET);
  h.set_job_id("other");
  absl::Status s = CheckEnvelopeHeader(e_, h);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("job 'other' (config hash 'hash') but this worker runs job 'job'"), std::string::npos)
      << s;
  h = Header(Kind::TARGET);
  h.set_config_hash("");
  EXPECT_EQ(CheckEnvelopeHeader(e_, h).code(), absl::StatusCode::kFailedPrecondition);
  // The per-step calls may leave the hash out (the job id names the configuration); a wrong one is still refused.
  EXPECT_TRUE(CheckStepJob(e_, "job", "", "plan").ok());
  EXPECT_TRUE(CheckStepJob(e_, "job", "hash", "plan").ok());
  EXPECT_EQ(CheckStepJob(e_, "job", "other", "plan").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckStepJob(e_, "other", "", "plan").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RequestChecksTest, StepWindowMicroBatchAndChunkRanges) {
  const TensorMap t = Target(config_.out_dim());
  EXPECT_EQ(Code(Header(Kind::TARGET, 4), t), absl::StatusCode::kOutOfRange);  // stale
  for (int64_t step : {5, 6, 7}) EXPECT_EQ(Code(Header(Kind::TARGET, step), t), absl::StatusCode::kOk) << step;
  EXPECT_EQ(Code(Header(Kind::TARGET, 8), t), absl::StatusCode::kOutOfRange);  // too far ahead
  e_.current_step = -1;                                                        // before the first step
  EXPECT_EQ(Code(Header(Kind::TARGET, 1000), t), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Header(Kind::TARGET, -1), t), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::TARGET, 0, 2), t), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::TARGET, 0, -1), t), absl::StatusCode::kInvalidArgument);
  v1::EnvelopeHeader h = Header(Kind::TARGET, 0);
  h.set_chunk(1);
  EXPECT_EQ(Code(h, t), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::INPUTS, 0), {}), absl::StatusCode::kInvalidArgument);  // not the first stage
  EXPECT_EQ(Code(Header(static_cast<Kind::Kind>(99), 0), {}), absl::StatusCode::kInvalidArgument);
}

TEST_F(RequestChecksTest, TargetsMustBeFiniteAndShaped) {
  const int64_t w = config_.out_dim();
  EXPECT_EQ(Code(Header(Kind::TARGET), Target(w + 1)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::TARGET), {{"target", at::zeros({6, w})}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::TARGET), {{"target", at::zeros({1, 6, w}, at::kLong)}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::TARGET), {{"target", at::zeros({1, 6, w})}, {"extra", at::zeros({1})}}),
            absl::StatusCode::kInvalidArgument);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    TensorMap t = Target(w);
    t["target"][0][3][0] = bad;
    EXPECT_EQ(Code(Header(Kind::TARGET), t), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(RequestChecksTest, GradientsActivationsAndWeights) {
  const int64_t d = config_.inner_dim();
  e_.takes_gradient = true;
  EXPECT_EQ(Code(Header(Kind::GRADIENT), {{"img", at::zeros({1, 6, d})}, {"txt", at::zeros({1, 4, d})}}),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code(Header(Kind::GRADIENT), {{"joint", at::zeros({1, 10, d})}}), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Header(Kind::GRADIENT), {{"img", at::zeros({1, 6, d})}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::GRADIENT), {{"joint", at::zeros({1, 10, d + 1})}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::ACTIVATION), {{"img", at::zeros({1, 6, d})}, {"txt", at::zeros({1, 4, d})}}),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code(Header(Kind::ACTIVATION), {{"img", at::zeros({1, 6, d}, at::kDouble)}, {"txt", at::zeros({1, 4, d})}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::LORA_WEIGHTS), {{"a.lora_A.weight", at::zeros({2, 16})}}), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Header(Kind::LORA_WEIGHTS), {{"a.lora_A.weight", at::zeros({16, 2})}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::LORA_WEIGHTS), {{"b.lora_A.weight", at::zeros({2, 16})}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::LORA_WEIGHTS), {{"a.lora_A.weight", at::full({2, 16}, NAN)}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::ROPE), {{"rope_cos/k", at::zeros({10, 8})}, {"rope_sin/k", at::zeros({10, 8})}}),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code(Header(Kind::ROPE), {{"rope_cos/k", at::zeros({10, 8})}, {"rope_sin/j", at::zeros({10, 8})}}),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RequestChecksTest, StepPlans) {
  v1::StepPlan plan;
  plan.set_job_id("job");
  plan.set_config_hash("hash");
  plan.set_step(5);
  plan.set_micro_batches(2);
  plan.add_actions()->set_type(v1::Action::FORWARD);
  EXPECT_TRUE(CheckStepPlan(e_, plan).ok());
  plan.set_micro_batches(3);
  EXPECT_EQ(CheckStepPlan(e_, plan).code(), absl::StatusCode::kInvalidArgument);
  plan.set_micro_batches(2);
  plan.mutable_actions(0)->set_micro_batch(2);
  EXPECT_EQ(CheckStepPlan(e_, plan).code(), absl::StatusCode::kInvalidArgument);
  plan.mutable_actions(0)->set_micro_batch(0);
  plan.mutable_actions(0)->set_type(v1::Action::TYPE_UNSPECIFIED);
  EXPECT_EQ(CheckStepPlan(e_, plan).code(), absl::StatusCode::kInvalidArgument);
  plan.mutable_actions(0)->set_type(v1::Action::FORWARD);
  plan.set_step(3);
  EXPECT_EQ(CheckStepPlan(e_, plan).code(), absl::StatusCode::kOutOfRange);
  plan.set_step(5);
  plan.set_config_hash("x");
  EXPECT_EQ(CheckStepPlan(e_, plan).code(), absl::StatusCode::kFailedPrecondition);
}

// stage.proto's contract: FAILED_PRECONDITION for another job, OUT_OF_RANGE only for a step outside the moving window,
// INVALID_ARGUMENT for everything malformed, whatever the step.
TEST_F(RequestChecksTest, EachRefusalHasItsStatusCode) {
  const TensorMap t = Target(config_.out_dim());
  v1::EnvelopeHeader foreign = Header(Kind::TARGET, 5);
  foreign.set_job_id("other");
  v1::EnvelopeHeader chunk = Header(Kind::TARGET, 5);
  chunk.set_chunk(7);
  const std::vector<std::pair<v1::EnvelopeHeader, absl::StatusCode>> cases = {
      {foreign, absl::StatusCode::kFailedPrecondition},
      {Header(Kind::TARGET, 4), absl::StatusCode::kOutOfRange},          // stale
      {Header(Kind::TARGET, 8), absl::StatusCode::kOutOfRange},          // early
      {Header(Kind::TARGET, 5, 9), absl::StatusCode::kInvalidArgument},  // micro-batch
      {chunk, absl::StatusCode::kInvalidArgument},                       // chunk
      {Header(Kind::INPUTS, 5), absl::StatusCode::kInvalidArgument},     // a kind this stage never receives
  };
  for (const auto& [header, code] : cases) {
    EXPECT_EQ(Code(header, t), code) << header.ShortDebugString();
  }
  // LORA_WEIGHTS belong to the whole step (micro-batch 0); ROPE tables name the micro-batch that first needed them.
  EXPECT_TRUE(CheckEnvelopeHeader(e_, Header(Kind::LORA_WEIGHTS, 5, 0)).ok());
  EXPECT_EQ(CheckEnvelopeHeader(e_, Header(Kind::LORA_WEIGHTS, 5, 1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEnvelopeHeader(e_, Header(Kind::ROPE, 5, 1)).ok());
  e_.current_step = -1;  // no window yet: a negative step is still malformed, not early
  EXPECT_EQ(Code(Header(Kind::TARGET, -3), t), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(Header(Kind::TARGET, 0), t), absl::StatusCode::kOk);
}

TEST_F(RequestChecksTest, ForwardOnlyPassesAreKeptApartAndForwardOnly) {
  // A pass's pushes are not held to the step window (passes run between steps), and take no TARGET.
  v1::EnvelopeHeader h = Header(Kind::TARGET, 2);
  h.set_pass(4);
  EXPECT_EQ(CheckEnvelopeHeader(e_, h).code(), absl::StatusCode::kInvalidArgument);
  h = Header(Kind::ACTIVATION, 2);
  h.set_pass(4);
  EXPECT_TRUE(CheckEnvelopeHeader(e_, h).ok()) << CheckEnvelopeHeader(e_, h);
  EXPECT_EQ(CheckEnvelopeHeader(e_, Header(Kind::ACTIVATION, 2)).code(), absl::StatusCode::kOutOfRange);

  v1::StepPlan plan;
  plan.set_job_id("job");
  plan.set_config_hash("hash");
  plan.set_step(2);  // outside the window: fine for a pass
  plan.set_pass(4);
  plan.set_micro_batches(1);  // fewer than configured: fine for a pass
  plan.add_actions()->set_type(v1::Action::FORWARD);
  EXPECT_TRUE(CheckStepPlan(e_, plan).ok()) << CheckStepPlan(e_, plan);
  plan.add_actions()->set_type(v1::Action::BACKWARD);
  absl::Status s = CheckStepPlan(e_, plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("FORWARD actions only"), std::string::npos) << s;
  plan.mutable_actions(1)->set_type(v1::Action::FORWARD);
  EXPECT_EQ(CheckStepPlan(e_, plan).code(), absl::StatusCode::kInvalidArgument);  // micro-batch 0 twice
  plan.mutable_actions(1)->set_micro_batch(1);
  EXPECT_EQ(CheckStepPlan(e_, plan).code(), absl::StatusCode::kInvalidArgument);  // beyond the pass's 1 micro-batch
  plan.set_micro_batches(3);
  EXPECT_EQ(CheckStepPlan(e_, plan).code(), absl::StatusCode::kInvalidArgument);  // more than configured
}

// LoadState's envelope: every adapter, moments only of adapters here and of their shape, and the step count; a Push
// of that kind is refused outright.
TEST_F(RequestChecksTest, TheStateOfAStageLocalOptimizerIsCheckedWhole) {
  auto check = [&](TensorMap t) { return CheckLoraState(e_, t).code(); };
  const at::Tensor w = at::zeros({2, 16});
  const at::Tensor step = at::scalar_tensor(3, at::kLong);
  EXPECT_EQ(check({{"a.lora_A.weight", w}, {"__step__", step}}), absl::StatusCode::kOk);
  EXPECT_EQ(check({{"a.lora_A.weight", w},
                   {"a.lora_A.weight.exp_avg", w},
                   {"a.lora_A.weight.exp_avg_sq", w},
                   {"__step__", step}}),
            absl::StatusCode::kOk);
  EXPECT_EQ(check({{"a.lora_A.weight", w}}), absl::StatusCode::kInvalidArgument);  // no step count
  EXPECT_EQ(check({{"__step__", step}}), absl::StatusCode::kInvalidArgument);      // no adapter
  EXPECT_EQ(check({{"a.lora_A.weight", w}, {"__step__", at::scalar_tensor(-1, at::kLong)}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check({{"a.lora_A.weight", w}, {"b.lora_A.weight.exp_avg", w}, {"__step__", step}}),
            absl::StatusCode::kInvalidArgument);  // the moment of no adapter here
  EXPECT_EQ(check({{"a.lora_A.weight", w}, {"a.lora_A.weight.exp_avg", at::zeros({16, 2})}, {"__step__", step}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check({{"a.lora_A.weight", w}, {"a.lora_A.weight.exp_avg", at::full({2, 16}, NAN)}, {"__step__", step}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckEnvelopeHeader(e_, Header(Kind::LORA_STATE)).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton
