// Wan sample videos during training, end to end: the tiny I2V pipeline (baton init-weights --pipeline wan-i2v-tiny),
// the bundled clips encoded by encoder_worker with first-frame conditioning, and a job with `samples:` (a training
// clip's first frame animated, CFG) run by train-local and by the coordinator over two stage workers. Rendering only
// reads the adapters: each run's LoRA equals, bitwise, that of the same job without samples.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <string>

#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::SourceDir;

class WanSamplesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("wan-samples"));
    Run(absl::StrCat(BinDir(), "/baton init-weights --pipeline wan-i2v-tiny --seed 0 --out ", *dir_, "/pipeline"));
    Run(absl::StrCat(BinDir(), "/encoder_worker --dataset ", SourceDir(), "/data/wan_sample --cache ", *dir_,
                     "/cache --model ", *dir_,
                     "/pipeline --resolution 32 --max_frames 5 --max_sequence_length 16 "
                     "--threads 1"));
  }
  static void TearDownTestSuite() { delete dir_; }

  static void Run(const std::string& command) {
    auto r = test_util::RunCommand(command, true);
    ASSERT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  }

  // A short job; `samples` adds two prompts rendered every 2 of 4 steps from a clip's first frame.
  static std::string Job(const std::string& name, bool samples) {
    std::string yaml =
        absl::StrCat("model: ", *dir_, "/pipeline\ndataset: ", *dir_, "/cache\n",
                     "lora: {rank: 4, targets: attention}\noptimizer: {lr: 0.01}\nsteps: 4\n"
                     "batch_size: 2\nmicro_batches: 2\nseed: 3\ntimesteps: {sampling: none, shift: 5}\n");
    if (samples) {
      absl::StrAppend(&yaml,
                      "samples: {every: 2, prompts: [a red circle, a yellow square], steps: 3, guidance: 3.0, "
                      "size: [32, 32], frames: 5, negative_prompt: blurry, image: ",
                      SourceDir(), "/data/wan_sample/red_circle_right.mp4}\n");
    }
    const std::string path = JoinPath(*dir_, name + ".yaml");
    EXPECT_TRUE(WriteFileAtomic(path, yaml).ok());
    return path;
  }

  static std::string Lora(const std::string& out) {
    auto bytes = ReadFile(JoinPath(JoinPath(*dir_, out), "lora.safetensors"));
    EXPECT_TRUE(bytes.ok()) << out;
    return bytes.ok() ? *bytes : "";
  }

  static void ExpectRendered(const std::string& out) {
    for (int step : {0, 2, 4}) {
      const std::string d = JoinPath(*dir_, absl::StrCat(out, "/samples/step-", step));
      for (const char* f : {"0.mp4", "1.mp4", "contact_sheet.png", "prompts.txt"}) {
        EXPECT_TRUE(PathExists(JoinPath(d, f))) << d << "/" << f;
      }
    }
  }

  static std::string* dir_;
};

std::string* WanSamplesTest::dir_ = nullptr;

TEST_F(WanSamplesTest, TrainLocalSamplesLeaveTheLoraBitwiseUnchanged) {
  Run(absl::StrCat(BinDir(), "/baton train-local --job ", Job("plain", false), " --output ", *dir_, "/local-plain"));
  Run(absl::StrCat(BinDir(), "/baton train-local --job ", Job("samples", true), " --output ", *dir_, "/local-samples"));
  ExpectRendered("local-samples");
  const std::string plain = Lora("local-plain");
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain, Lora("local-samples"));
}

TEST_F(WanSamplesTest, StageSamplesLeaveTheLoraBitwiseUnchanged) {
  Run(absl::StrCat(BinDir(), "/coordinator --stages 2 --job ", Job("plain", false), " --output ", *dir_,
                   "/stages-plain"));
  Run(absl::StrCat(BinDir(), "/coordinator --stages 2 --job ", Job("samples", true), " --output ", *dir_,
                   "/stages-samples"));
  ExpectRendered("stages-samples");
  const std::string plain = Lora("stages-plain");
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain, Lora("stages-samples"));
}

}  // namespace
}  // namespace baton
