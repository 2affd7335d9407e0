// What a training step on CUDA waits for: nothing but its one read-back (the losses and the gradients' norms), with
// the micro-batches' uploads, the RoPE tables, the optimizer and the adapters all on the device; and the bulk copies
// the stage's state read-back and rollback go through, exact both ways. c10's sync debug mode catches every other
// synchronization (SyncWatch), and a failure prints where each was made. Every test SKIPS without a CUDA device.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/device/bulk_copy.h"
#include "core/device/device.h"
#include "core/device/readback.h"
#include "core/device/sync_watch.h"
#include "core/lora/lora.h"
#include "core/model/flux2_weights.h"
#include "core/model/model_family.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/local_step.h"

namespace baton {
namespace {

const at::Device kCuda(at::kCUDA, 0);

class CudaStepSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << BuildAndDeviceSummary() << ")";
  }
};

std::string Joined(const std::vector<std::string>& sites) {
  std::string s;
  for (const std::string& site : sites) s += "\n--- a synchronization at:\n" + site;
  return s;
}

// The tiny FLUX.2 in bf16 on the device as `baton train-local` builds it, and two micro-batches of one grid.
TEST_F(CudaStepSyncTest, ALocalStepSynchronizesOnlyInItsReadBack) {
  const std::string dir = test_util::MakeTempDir("cuda_step_sync");
  ASSERT_TRUE(WriteRandomFlux2Weights(test_util::TinyFlux2Config(), dir, 3).ok());
  auto model = OpenModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  LoraSpec lora;
  lora.rank = 4;
  lora.targets = *(*model)->LoraTargets("all-linear");
  lora.dtype = at::kBFloat16;
  LocalModel local;
  local.device = kCuda;
  local.dtype = at::kBFloat16;
  auto shell = (*model)->BuildShell(at::kBFloat16, kCuda);
  auto stage = (*model)->BuildStage((*model)->FullRange(), at::kBFloat16, kCuda, &lora, true, WeightQuant::kNone);
  ASSERT_TRUE(shell.ok() && stage.ok()) << shell.status() << stage.status();
  local.shell = std::move(*shell);
  local.stage = std::move(*stage);
  std::vector<MicroBatch> mbs(2);
  for (MicroBatch& mb : mbs) {
    NoisyBatch b;
    b.noisy = at::randn({1, 6, 4});
    b.prompt_embeds = at::randn({1, 5, 12});
    b.grid_h = 2;
    b.grid_w = 3;
    b.guidance = 4.0;
    b.timestep = at::full({1}, 0.4);
    auto inputs = (*model)->MicroBatchInputs(b);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    mb.model_inputs = *inputs;
    mb.target = at::randn({1, 6, 4});
    mb.samples = {0};
  }
  std::map<std::string, at::Tensor> master = LoraParameters(local.stage->module());
  OptimizerConfig opt;
  Optimizer adamw(opt);
  auto first = RunLocalStep(local, mbs, 0, 10, opt, adamw, master);  // the RoPE tables of the grid, made once
  ASSERT_TRUE(first.ok()) << first.status();
  const int64_t before = ReadBackCount();
  SyncWatch watch;
  auto second = RunLocalStep(local, mbs, 1, 10, opt, adamw, master);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(watch.sites().empty()) << watch.sites().size() << " synchronizations:" << Joined(watch.sites());
  EXPECT_EQ(ReadBackCount() - before, 1);
  EXPECT_TRUE(std::isfinite(second->loss));
}

// DownloadAll and UploadAll in buckets smaller than one tensor and larger than several: every value and dtype back
// as it went; an upload waits for nothing.
TEST_F(CudaStepSyncTest, BulkCopiesCarryEveryTensorExactlyBothWays) {
  const std::map<std::string, at::Tensor> host = {
      {"a.lora_A.weight", at::randn({16, 64})},
      {"a.lora_B.weight", at::randn({64, 16}).to(at::kBFloat16)},
      {"a.exp_avg", at::randn({3, 5})},
      {"__step__", at::scalar_tensor(7, at::kLong)},
      {"b.exp_avg_q8", at::randint(0, 255, {300}).to(at::kByte)},
  };
  for (int64_t bucket : {int64_t{256}, int64_t{1} << 20}) {
    std::map<std::string, at::Tensor> device;
    {
      SyncWatch watch;
      device = UploadAll(host, kCuda, bucket);
      EXPECT_TRUE(watch.sites().empty()) << Joined(watch.sites());
    }
    for (const auto& [name, t] : device) EXPECT_TRUE(t.is_cuda()) << name;
    const auto back = DownloadAll(device, std::nullopt, HostTensors::kCopy, bucket);
    for (const auto& [name, t] : host) {
      EXPECT_TRUE(back.at(name).is_cpu() && back.at(name).is_pinned()) << name;
      EXPECT_TRUE(at::equal(back.at(name), t)) << name << " bucket " << bucket;
    }
    const auto fp32 = DownloadAll({{"b", device.at("a.lora_B.weight")}}, at::kFloat, HostTensors::kCopy, bucket);
    EXPECT_TRUE(at::equal(fp32.at("b"), host.at("a.lora_B.weight").to(at::kFloat)));
  }
}

}  // namespace
}  // namespace baton
