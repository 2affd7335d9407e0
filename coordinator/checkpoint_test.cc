#include "coordinator/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/util/files.h"

namespace baton {
namespace {

// A fresh directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() : path_(JoinPath(::testing::TempDir(), "baton_ckpt_XXXXXX")) {
    EXPECT_NE(::mkdtemp(path_.data()), nullptr) << path_;
  }
  ~TempDir() { (void)RemoveAll(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A state whose tensors depend on `seed`, so checkpoints of different steps differ.
TrainingState MakeState(int64_t step, uint64_t seed) {
  at::manual_seed(seed);
  TrainingState s;
  s.step = step;
  s.lora["single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_A.weight"] = at::randn({4, 16});  // [r, in]
  s.lora["single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_B.weight"] = at::randn({48, 4});  // [out, r]
  s.optimizer["single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_A.weight.exp_avg"] = at::randn({4, 16});
  s.optimizer["single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_A.weight.exp_avg_sq"] = at::rand({4, 16});
  s.optimizer["__step__"] = at::scalar_tensor(step, at::kLong);
  s.job_hash = "job-abc123";
  s.extra_json = nlohmann::json{{"loss_tail", {0.5, 0.25}}, {"seed", seed}}.dump();
  return s;
}

void ExpectSameTensors(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, t] : a) {
    auto it = b.find(key);
    ASSERT_NE(it, b.end()) << key;
    EXPECT_EQ(t.scalar_type(), it->second.scalar_type()) << key;
    EXPECT_EQ(t.sizes(), it->second.sizes()) << key;
    EXPECT_TRUE(at::equal(t, it->second)) << key;  // bit-equal, not approximately
  }
}

void FlipByte(const std::string& path, size_t offset_from_end) {
  std::string data = *ReadFile(path);
  ASSERT_GT(data.size(), offset_from_end);
  data[data.size() - 1 - offset_from_end] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomic(path, data).ok());
}

TEST(CheckpointTest, RoundTrip) {
  TempDir tmp;
  const std::string out = tmp.path();
  TrainingState s = MakeState(7, 1);
  ASSERT_TRUE(WriteCheckpoint(out, s).ok());
  EXPECT_TRUE(PathExists(JoinPath(CheckpointDir(out, 7), "lora.safetensors")));
  EXPECT_TRUE(PathExists(JoinPath(CheckpointDir(out, 7), "optimizer.safetensors")));
  EXPECT_TRUE(PathExists(JoinPath(CheckpointDir(out, 7), "state.json")));

  auto loaded = LoadLatestCheckpoint(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 7);
  EXPECT_EQ(loaded->job_hash, "job-abc123");
  EXPECT_EQ(nlohmann::json::parse(loaded->extra_json), nlohmann::json::parse(s.extra_json));
  ExpectSameTensors(s.lora, loaded->lora);
  ExpectSameTensors(s.optimizer, loaded->optimizer);
  EXPECT_EQ(loaded->optimizer.at("__step__").item<int64_t>(), 7);
}

TEST(CheckpointTest, LoraIsStoredAsFp32) {
  TempDir tmp;
  const std::string out = tmp.path();
  TrainingState s = MakeState(1, 2);
  at::Tensor bf16 = at::randn({2, 3}).to(at::kBFloat16);
  s.lora["x.lora_A.weight"] = bf16;
  ASSERT_TRUE(WriteCheckpoint(out, s).ok());
  auto loaded = LoadCheckpoint(out, 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->lora.at("x.lora_A.weight").scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(loaded->lora.at("x.lora_A.weight"), bf16.to(at::kFloat)));

  s.lora["bad"] = at::ones({2}, at::kLong);
  absl::Status st = WriteCheckpoint(out, s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'bad'"), std::string::npos) << st;
}

TEST(CheckpointTest, RejectsExtraThatIsNotAnObject) {
  TempDir tmp;
  const std::string out = tmp.path();
  TrainingState s = MakeState(1, 3);
  s.extra_json = "[1, 2";
  EXPECT_EQ(WriteCheckpoint(out, s).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PathExists(CheckpointDir(out, 1)));
}

TEST(CheckpointTest, NotFoundWhenEmpty) {
  TempDir tmp;
  const std::string out = tmp.path();
  EXPECT_EQ(LoadLatestCheckpoint(out).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(MakeDirs(JoinPath(out, "checkpoints")).ok());
  EXPECT_EQ(LoadLatestCheckpoint(out).status().code(), absl::StatusCode::kNotFound);
  auto steps = ListCheckpointSteps(out);
  ASSERT_TRUE(steps.ok());
  EXPECT_TRUE(steps->empty());
  EXPECT_EQ(LoadCheckpoint(out, 3).status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, LeftoverTempDirIsIgnoredAndRemoved) {
  TempDir tmp;
  const std::string out = tmp.path();
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(5, 4)).ok());
  // An interrupted write of step 9: files present but no state.json, under the temporary name.
  std::string leftover = JoinPath(JoinPath(out, "checkpoints"), "step-9.tmp-12345");
  ASSERT_TRUE(MakeDirs(leftover).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(leftover, "lora.safetensors"), "partial").ok());

  auto steps = ListCheckpointSteps(out);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, std::vector<int64_t>({5}));
  EXPECT_TRUE(PathExists(leftover));  // listing is read-only

  auto loaded = LoadLatestCheckpoint(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 5);
  EXPECT_FALSE(PathExists(leftover));
}

TEST(CheckpointTest, CorruptLoraFallsBackToPrevious) {
  TempDir tmp;
  const std::string out = tmp.path();
  TrainingState s3 = MakeState(3, 5);
  ASSERT_TRUE(WriteCheckpoint(out, s3).ok());
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(4, 6)).ok());
  // Flip one bit in the tensor data: same size, so only the hash can tell.
  FlipByte(JoinPath(CheckpointDir(out, 4), "lora.safetensors"), 3);

  EXPECT_EQ(LoadCheckpoint(out, 4).status().code(), absl::StatusCode::kDataLoss);
  auto loaded = LoadLatestCheckpoint(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 3);
  ExpectSameTensors(s3.lora, loaded->lora);
}

TEST(CheckpointTest, TruncatedStateJsonFallsBackToPrevious) {
  TempDir tmp;
  const std::string out = tmp.path();
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(10, 7)).ok());
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(20, 8)).ok());
  std::string state_path = JoinPath(CheckpointDir(out, 20), "state.json");
  std::string text = *ReadFile(state_path);
  ASSERT_TRUE(WriteFileAtomic(state_path, text.substr(0, text.size() / 2)).ok());

  auto steps = ListCheckpointSteps(out);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, std::vector<int64_t>({10}));
  auto loaded = LoadLatestCheckpoint(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 10);
}

TEST(CheckpointTest, TruncatedOptimizerFileIsNotComplete) {
  TempDir tmp;
  const std::string out = tmp.path();
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(1, 9)).ok());
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(2, 10)).ok());
  std::string path = JoinPath(CheckpointDir(out, 2), "optimizer.safetensors");
  std::string data = *ReadFile(path);
  ASSERT_TRUE(WriteFileAtomic(path, data.substr(0, data.size() - 8)).ok());
  EXPECT_EQ(*ListCheckpointSteps(out), std::vector<int64_t>({1}));
  EXPECT_EQ(LoadLatestCheckpoint(out)->step, 1);
}

TEST(CheckpointTest, AllCorruptIsNotFound) {
  TempDir tmp;
  const std::string out = tmp.path();
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(1, 11)).ok());
  FlipByte(JoinPath(CheckpointDir(out, 1), "optimizer.safetensors"), 0);
  EXPECT_EQ(LoadLatestCheckpoint(out).status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, KeepPrunesOldest) {
  TempDir tmp;
  const std::string out = tmp.path();
  for (int64_t step : {1, 2, 3, 4, 5}) ASSERT_TRUE(WriteCheckpoint(out, MakeState(step, step), /*keep=*/2).ok());
  EXPECT_EQ(*ListCheckpointSteps(out), std::vector<int64_t>({4, 5}));
  EXPECT_FALSE(PathExists(CheckpointDir(out, 3)));

  // Writing an older step than the newest one still keeps the one just written.
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(3, 3), /*keep=*/1).ok());
  EXPECT_EQ(*ListCheckpointSteps(out), std::vector<int64_t>({3, 5}));

  // keep = 0 keeps everything.
  for (int64_t step : {6, 7, 8}) ASSERT_TRUE(WriteCheckpoint(out, MakeState(step, step), /*keep=*/0).ok());
  EXPECT_EQ(*ListCheckpointSteps(out), std::vector<int64_t>({3, 5, 6, 7, 8}));
}

TEST(CheckpointTest, RewritingTheSameStepReplacesIt) {
  TempDir tmp;
  const std::string out = tmp.path();
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(6, 12)).ok());
  TrainingState second = MakeState(6, 13);
  second.job_hash = "job-second";
  ASSERT_TRUE(WriteCheckpoint(out, second).ok());

  auto loaded = LoadLatestCheckpoint(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->job_hash, "job-second");
  ExpectSameTensors(second.lora, loaded->lora);
  // Only step-6 remains: no temporary or set-aside directories.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(JoinPath(out, "checkpoints"))) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>({"step-6"}));
}

TEST(CheckpointTest, StateJsonRecordsFiles) {
  TempDir tmp;
  const std::string out = tmp.path();
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(2, 14)).ok());
  std::string dir = CheckpointDir(out, 2);
  auto j = nlohmann::json::parse(*ReadFile(JoinPath(dir, "state.json")));
  EXPECT_EQ(j["step"], 2);
  EXPECT_EQ(j["job_hash"], "job-abc123");
  EXPECT_EQ(j["files"]["lora.safetensors"]["bytes"].get<uint64_t>(),
            std::filesystem::file_size(JoinPath(dir, "lora.safetensors")));
  EXPECT_EQ(j["files"]["optimizer.safetensors"]["sha256"].get<std::string>().size(), 64u);
}

TEST(CheckpointTest, StepMismatchBetweenDirAndStateIsCorrupt) {
  TempDir tmp;
  const std::string out = tmp.path();
  ASSERT_TRUE(WriteCheckpoint(out, MakeState(2, 15)).ok());
  std::filesystem::rename(CheckpointDir(out, 2), CheckpointDir(out, 9));
  EXPECT_EQ(LoadCheckpoint(out, 9).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(LoadLatestCheckpoint(out).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace baton
