// Both Wan 2.2 A14B experts in one job (`expert: both`, core/train/experts.h), end to end with the real binaries on a
// tiny two-expert image-to-video pipeline (transformer/ + transformer_2/, boundary_ratio 0.9): `coordinator --stages
// 2` trains one LoRA per expert, and each equals what a one-expert job (`expert: high` / `low`) of the same seed
// gives for that expert's share of the steps in `baton train-local` -- the same samples, noise and timesteps.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::RunCommand;
using test_util::RunOk;
using test_util::SourceDir;

std::string WriteJob(const std::string& dir, const std::string& name, const std::string& expert, int64_t steps) {
  const std::string path = JoinPath(dir, name + ".yaml");
  std::ofstream(path) << "model: " << JoinPath(dir, "pipeline") << "\ndataset: " << JoinPath(dir, "cache")
                      << "\nexpert: " << expert << "\nlora: {rank: 4, alpha: 4, targets: attention}\n"
                      << "optimizer: {lr: 5.0e-3, warmup_steps: 1}\ntimesteps: {sampling: none, shift: 3}\n"
                      << "steps: " << steps << "\nbatch_size: 2\nmicro_batches: 2\nseed: 3\ncheckpoint_every: 0\n";
  return path;
}

int64_t LoggedSteps(const std::string& dir) {
  auto log = ReadFile(JoinPath(dir, "train_log.jsonl"));
  EXPECT_TRUE(log.ok()) << log.status();
  return log.ok() ? static_cast<int64_t>(std::count(log->begin(), log->end(), '\n')) : -1;
}

double MaxDifference(const std::string& a_file, const std::string& b_file) {
  auto a = LoadAllSafetensors(a_file);
  auto b = LoadAllSafetensors(b_file);
  EXPECT_TRUE(a.ok() && b.ok()) << a_file << " " << b_file;
  if (!a.ok() || !b.ok() || a->size() != b->size()) return 1e9;
  double worst = 0;
  for (const auto& [name, w] : *a) {
    if (!b->count(name)) return 1e9;
    worst = std::max(worst, (w - b->at(name)).abs().max().item<double>());
  }
  return worst;
}

TEST(WanExpertsTest, BothExpertsInOneJobEqualTheTwoOneExpertJobs) {
  const std::string dir = test_util::MakeTempDir("wan_experts");
  const std::string bin = BinDir();
  RunOk(absl::StrCat(JoinPath(bin, "baton"), " init-weights --pipeline wan-i2v-a14b-tiny --out ",
                     JoinPath(dir, "pipeline")));
  RunOk(absl::StrCat(JoinPath(bin, "encoder_worker"), " --dataset ", JoinPath(SourceDir(), "data/wan_sample"),
                     " --cache ", JoinPath(dir, "cache"), " --model ", JoinPath(dir, "pipeline"),
                     " --resolution 64 --max_frames 9 --max_sequence_length 32 --threads 1"));
  const std::string both = WriteJob(dir, "both", "both", 10);
  const std::string out =
      RunOk(absl::StrCat(JoinPath(bin, "coordinator"), " --stages 2 --job ", both, " --output ", JoinPath(dir, "pp")));
  EXPECT_NE(out.find("expert high_noise:"), std::string::npos) << out;
  const int64_t high = LoggedSteps(JoinPath(dir, "pp/high_noise"));
  const int64_t low = LoggedSteps(JoinPath(dir, "pp/low_noise"));
  EXPECT_EQ(high + low, 10);
  ASSERT_GT(high, 0);  // shift 3: P(t >= 0.9) = 1/4 per step; seed 3 draws both
  ASSERT_GT(low, 0);
  for (const auto& [name, steps] : std::vector<std::pair<std::string, int64_t>>{{"high", high}, {"low", low}}) {
    const std::string job = WriteJob(dir, name, name, steps);
    RunOk(absl::StrCat(JoinPath(bin, "baton"), " train-local --job ", job, " --output ", JoinPath(dir, name)));
    EXPECT_LE(MaxDifference(JoinPath(dir, name + "/lora.safetensors"),
                            JoinPath(dir, "pp/" + name + "_noise/lora.safetensors")),
              1e-6)
        << name;
  }
  // Two experts, two different LoRAs.
  EXPECT_GT(MaxDifference(JoinPath(dir, "high/lora.safetensors"), JoinPath(dir, "low/lora.safetensors")), 1e-4);
}

TEST(WanExpertsTest, BothExpertsNeedATwoExpertFolder) {
  const std::string dir = test_util::MakeTempDir("wan_experts_one");
  const std::string bin = BinDir();
  RunOk(
      absl::StrCat(JoinPath(bin, "baton"), " init-weights --pipeline wan-i2v-tiny --out ", JoinPath(dir, "pipeline")));
  const std::string job = WriteJob(dir, "both", "both", 2);
  auto r =
      RunCommand(absl::StrCat(JoinPath(bin, "baton"), " train-local --job ", job, " --output ", JoinPath(dir, "out")),
                 /*with_stderr=*/true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("holds one transformer"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace baton
