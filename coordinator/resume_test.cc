// coordinator/resume.h: which checkpoint --resume continues from, and each reason it refuses.
#include "coordinator/resume.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <functional>

#include "core/util/files.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = JoinPath(::testing::TempDir(), "baton_resume_XXXXXX");
    ASSERT_NE(::mkdtemp(out_.data()), nullptr);
  }
  void TearDown() override { (void)RemoveAll(out_); }

  // The stages' fresh adapters for a one-Linear LoRA of rank 2, and a checkpoint of them after `step` steps.
  static std::map<std::string, at::Tensor> Init() {
    return {{"blocks.0.to_q.lora_A.weight", at::zeros({2, 8})}, {"blocks.0.to_q.lora_B.weight", at::zeros({8, 2})}};
  }
  static TrainingState State(int64_t step) {
    TrainingState s;
    s.step = step;
    for (const auto& [name, t] : Init()) {
      s.lora[name] = at::full(t.sizes(), 0.1 * static_cast<double>(step));
      s.optimizer[name + ".exp_avg"] = at::full(t.sizes(), 0.01);
      s.optimizer[name + ".exp_avg_sq"] = at::full(t.sizes(), 0.001);
    }
    s.optimizer["__step__"] = at::scalar_tensor(step, at::kLong);
    s.job_hash = "hash-a";
    return s;
  }
  std::string out_;
};

TEST_F(ResumeTest, FlagTakesTrueIfAnyOrFalse) {
  ResumeMode mode;
  std::string error;
  for (const char* must : {"true", "1", "yes", "TRUE"}) {
    ASSERT_TRUE(AbslParseFlag(must, &mode, &error)) << must;
    EXPECT_EQ(mode, ResumeMode::kMust);
  }
  ASSERT_TRUE(AbslParseFlag("if-any", &mode, &error));
  EXPECT_EQ(mode, ResumeMode::kIfAny);
  ASSERT_TRUE(AbslParseFlag("false", &mode, &error));
  EXPECT_EQ(mode, ResumeMode::kOff);
  EXPECT_FALSE(AbslParseFlag("maybe", &mode, &error));
  EXPECT_THAT(error, HasSubstr("if-any"));
  EXPECT_EQ(AbslUnparseFlag(ResumeMode::kOff), "false");
  EXPECT_EQ(AbslUnparseFlag(ResumeMode::kMust), "true");
  EXPECT_EQ(AbslUnparseFlag(ResumeMode::kIfAny), "if-any");
}

TEST_F(ResumeTest, NoCheckpointRefusesUnlessIfAny) {
  auto must = LoadResumeCheckpoint(out_, /*if_any=*/false, /*quiet=*/true);
  ASSERT_EQ(must.status().code(), absl::StatusCode::kFailedPrecondition) << must.status();
  EXPECT_THAT(must.status().message(), HasSubstr("no checkpoint in " + JoinPath(out_, "checkpoints")));
  EXPECT_THAT(must.status().message(), HasSubstr("--resume=if-any"));
  ::testing::internal::CaptureStdout();
  auto if_any = LoadResumeCheckpoint(out_, /*if_any=*/true, /*quiet=*/false);
  const std::string said = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(if_any.ok()) << if_any.status();
  EXPECT_FALSE(if_any->has_value());
  EXPECT_THAT(said,
              HasSubstr("--resume=if-any: no checkpoint in " + JoinPath(out_, "checkpoints") + ", starting fresh"));
}

// Truncated files and a state.json that is not JSON are skipped, each named with its reason, for the newest
// valid checkpoint; with every one corrupt even if-any refuses, listing them all.
TEST_F(ResumeTest, NewestValidIsUsedAndEachCorruptOneIsNamed) {
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(WriteCheckpoint(out_, State(step)).ok());
  const std::string lora3 = JoinPath(CheckpointDir(out_, 3), "lora.safetensors");
  ASSERT_TRUE(WriteFileAtomic(lora3, ReadFile(lora3)->substr(0, 40)).ok());  // truncated
  ASSERT_TRUE(WriteFileAtomic(JoinPath(CheckpointDir(out_, 2), "state.json"), "{\"step\": 2, \"files\"").ok());

  ::testing::internal::CaptureStderr();
  auto state = LoadResumeCheckpoint(out_, /*if_any=*/false, /*quiet=*/true);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(state->has_value());
  EXPECT_EQ((*state)->step, 1);
  EXPECT_THAT(warned, HasSubstr("--resume: skipping corrupt checkpoint step-3: " + lora3 + ": size 40 bytes"));
  EXPECT_THAT(warned, HasSubstr("--resume: skipping corrupt checkpoint step-2: "));
  EXPECT_THAT(warned, HasSubstr("not valid JSON"));

  const std::string optimizer1 = JoinPath(CheckpointDir(out_, 1), "optimizer.safetensors");
  ASSERT_TRUE(WriteFileAtomic(optimizer1, "").ok());  // the optimizer state gone
  for (bool if_any : {false, true}) {
    ::testing::internal::CaptureStderr();
    auto none = LoadResumeCheckpoint(out_, if_any, /*quiet=*/true);
    ::testing::internal::GetCapturedStderr();
    ASSERT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition) << none.status();
    for (const char* step : {"step-3: ", "step-2: ", "step-1: "}) {
      EXPECT_THAT(none.status().message(), HasSubstr(step));
    }
    EXPECT_THAT(none.status().message(), HasSubstr("every one is corrupt"));
  }
}

TEST_F(ResumeTest, FingerprintDifferencesAreListed) {
  const JobFingerprint was = {{"data", "sha256:aa"}, {"optimizer.lr", "0.001"}, {"seed", "1"}};
  TrainingState state = State(2);
  state.extra_json = FingerprintExtraJson(was);
  EXPECT_TRUE(CheckResumeMatchesJob(state, out_, was, "another-hash").ok()) << "the fingerprint decides, not the hash";
  const JobFingerprint now = {{"data", "sha256:aa"}, {"optimizer.lr", "0.002"}, {"seed", "2"}};
  absl::Status s = CheckResumeMatchesJob(state, out_, now, "hash-a");
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("optimizer.lr: 0.001 → 0.002"));
  EXPECT_THAT(s.message(), HasSubstr("seed: 1 → 2"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("data:")));
  EXPECT_THAT(s.message(), HasSubstr(CheckpointDir(out_, 2)));

  state.extra_json = R"({"fingerprint": [["seed"]]})";
  EXPECT_EQ(CheckResumeMatchesJob(state, out_, now, "hash-a").code(), absl::StatusCode::kDataLoss);
}

TEST_F(ResumeTest, CheckpointWithoutFingerprintFallsBackToTheJobHash) {
  TrainingState state = State(2);  // extra_json "{}": written before fingerprints
  EXPECT_TRUE(CheckResumeMatchesJob(state, out_, {{"seed", "1"}}, "hash-a").ok());
  absl::Status s = CheckResumeMatchesJob(state, out_, {{"seed", "1"}}, "hash-b");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("another job (job hash hash-a vs hash-b)"));
}

// Checkpoints whose files verify but whose tensors do not fit the job: each is an error with its reason.
TEST_F(ResumeTest, TensorsThatDoNotFitTheJobAreRefused) {
  EXPECT_TRUE(CheckCheckpointTensors(State(2), Init(), OptimizerConfig{}).ok());
  const std::string a = "blocks.0.to_q.lora_A.weight";
  const std::vector<std::pair<std::function<void(TrainingState&)>, std::string>> cases = {
      {[&](TrainingState& s) { s.lora.erase(a); }, "lacks " + a},
      {[&](TrainingState& s) {
         s.lora["blocks.9.to_k.lora_A.weight"] = at::zeros({2, 8});
       },
       "which the job's LoRA"},
      {[&](TrainingState& s) {
         s.lora[a] = at::zeros({4, 8});
       },
       "has shape [4, 8], the job's LoRA [2, 8]"},
      {[&](TrainingState& s) {
         s.lora[a] = at::zeros({2, 8}, at::kInt);
       },
       "expected floating point"},
      {[&](TrainingState& s) { s.lora[a][0][0] = NAN; }, "non-finite"},
      {[&](TrainingState& s) { s.optimizer.erase("__step__"); }, "lacks __step__"},
      {[&](TrainingState& s) { s.optimizer["__step__"] = at::zeros({3}, at::kLong); }, "__step__ must be one integer"},
      {[&](TrainingState& s) { s.optimizer["__step__"] = at::scalar_tensor(1.5); }, "__step__ must be one integer"},
      {[&](TrainingState& s) { s.optimizer.erase(a + ".exp_avg_sq"); }, "lacks " + a + ".exp_avg_sq"},
      {[&](TrainingState& s) {
         s.optimizer[a + ".exp_avg"] = at::zeros({8, 2});
       },
       a + ".exp_avg is Float [8, 2]"},
      {[&](TrainingState& s) { s.optimizer["stray.exp_avg"] = at::zeros({1}); }, "belongs to no LoRA tensor"},
      {[&](TrainingState& s) {
         s.optimizer[a + ".ema"] = at::zeros({2, 8});
       },
       a + ".ema, which the job's optimizer (adamw, without an EMA) does not keep"},
  };
  for (const auto& [mutate, expect] : cases) {
    TrainingState s = State(2);
    mutate(s);
    absl::Status status = CheckCheckpointTensors(s, Init(), OptimizerConfig{});
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << expect << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(expect));
  }
  // Before the first optimizer step there are no moments yet: that is a complete state.
  TrainingState fresh = State(0);
  for (auto it = fresh.optimizer.begin(); it != fresh.optimizer.end();) {
    it = it->first == "__step__" ? std::next(it) : fresh.optimizer.erase(it);
  }
  EXPECT_TRUE(CheckCheckpointTensors(fresh, Init(), OptimizerConfig{}).ok());
}

}  // namespace
}  // namespace baton
