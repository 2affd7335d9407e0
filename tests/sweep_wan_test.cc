// A Wan sweep through the coordinator binary (`coordinator --stages 2` with a `sweep:` job): each member's LoRA and
// validation losses are bitwise those of the member trained alone, and so are its sample videos' bytes.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::RunOk;
using test_util::SourceDir;

// The Wan demo's job, shorter, with `extra` appended (a seed, or a sweep of seeds).
std::string WriteJob(const std::string& dir, const std::string& name, const std::string& extra) {
  const std::string path = JoinPath(dir, name + ".yaml");
  std::ofstream(path) << "model: " << JoinPath(dir, "pipeline") << "\ndataset: " << JoinPath(dir, "cache")
                      << "\nlora: {rank: 8, alpha: 8, targets: attention}\noptimizer: {lr: 5.0e-3, warmup_steps: 2}\n"
                         "timesteps: {sampling: none, shift: 5}\nsteps: 4\nbatch_size: 1\nmicro_batches: 1\n"
                         "checkpoint_every: 2\nthreads: 1\nname: wan-sweep\n"
                         "validation: {every: 2, samples: 2, timesteps: [0.25, 0.75]}\n"
                         "samples: {every: 4, prompts: [a red circle moving right], size: [64, 64], frames: 5, "
                         "steps: 2, guidance: 3.5, seed: 0}\n"
                      << extra;
  return path;
}

void ExpectSameRun(const std::string& member, const std::string& alone) {
  auto a = LoadAllSafetensors(JoinPath(alone, "lora.safetensors"));
  auto b = LoadAllSafetensors(JoinPath(member, "lora.safetensors"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), b->size());
  for (const auto& [name, t] : *a) {
    ASSERT_TRUE(b->count(name)) << name;
    EXPECT_TRUE(at::equal(t, b->at(name))) << member << ": " << name << " differs from the member trained alone";
  }
  const auto validations = test_util::ValidationLosses;
  EXPECT_EQ(validations(alone).size(), 3u) << "validation at steps 0, 2, 4";
  EXPECT_EQ(validations(alone), validations(member)) << member << ": validation differs from the member trained alone";
  for (const char* sample : {"samples/step-0/0.mp4", "samples/step-4/0.mp4"}) {
    auto ours = ReadFile(JoinPath(member, sample)), theirs = ReadFile(JoinPath(alone, sample));
    ASSERT_TRUE(ours.ok()) << ours.status();
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    EXPECT_TRUE(*ours == *theirs) << member << ": " << sample << " differs from the member trained alone";
  }
}

TEST(SweepWanTest, EachMemberOfATwoStageWanSweepEqualsTheMemberTrainedAlone) {
  const std::string dir = test_util::MakeTempDir("sweep_wan");
  const std::string bin = BinDir();
  RunOk(absl::StrCat(JoinPath(bin, "baton"), " init-weights --pipeline wan-tiny --out ", JoinPath(dir, "pipeline")));
  RunOk(absl::StrCat(JoinPath(bin, "encoder_worker"), " --dataset ", JoinPath(SourceDir(), "data/wan_sample"),
                     " --cache ", JoinPath(dir, "cache"), " --model ", JoinPath(dir, "pipeline"),
                     " --resolution 64 --max_frames 9 --max_sequence_length 32 --threads 1"));
  const std::string coordinator = absl::StrCat(JoinPath(bin, "coordinator"), " --stages 2 --job ");
  const std::string log = RunOk(absl::StrCat(coordinator, WriteJob(dir, "sweep", "sweep: {seed: [1, 2]}\n"),
                                             " --output ", JoinPath(dir, "sweep")));
  EXPECT_NE(log.find("sweep: 2 members on one set of stage workers: seed=1, seed=2"), std::string::npos) << log;
  EXPECT_NE(log.find("[seed=2] step 4/4"), std::string::npos) << log;
  for (const char* seed : {"1", "2"}) {
    RunOk(absl::StrCat(coordinator, WriteJob(dir, absl::StrCat("alone", seed), absl::StrCat("seed: ", seed, "\n")),
                       " --output ", JoinPath(dir, absl::StrCat("alone", seed))));
    ExpectSameRun(JoinPath(dir, absl::StrCat("sweep/seed=", seed)), JoinPath(dir, absl::StrCat("alone", seed)));
  }
}

}  // namespace
}  // namespace baton
