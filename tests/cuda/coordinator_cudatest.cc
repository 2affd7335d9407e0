// `coordinator --stages 2` with both stages on cuda:0 (job key devices: [cuda:0, cuda:0]) against the same job on
// the CPU: real stage_worker processes, gRPC on loopback, pinned uploads and downloads on the device path; and 2
// replicas with the stage-local optimizer on the device. SKIPS without a CUDA device.
//
// Tolerance: fp32 on both devices; the GPU reassociates sums, so losses and gradients differ by ~1e-6 relative
// (TF32 is off). AdamW divides each gradient element by its own running magnitude, so an element whose gradient
// is tiny (~1e-7 against typical ~1e-4) turns the same absolute error (~1e-10) into a larger step difference:
// lr · 1e-10 / 1e-7 = 1e-5 per step at lr 0.01. 1e-4 absolute on the LoRA after 3 steps covers that and is still
// 100x below one wrong step (a step moves an element by up to lr = 1e-2). No dropout: its masks come from each
// device's own generator.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <string>

#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/device/device.h"
#include "core/model/flux2_weights.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/job.h"
#include "core/util/files.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

// The tiny model and cache, and the job on `devices` (plus `extra` YAML).
class CudaCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << BuildAndDeviceSummary() << ")";
    dir_ = test_util::MakeTempDir("cuda_coordinator");
    Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir_, "model"), 1).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(dir_, "cache"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
            .ok());
  }
  JobConfig Job(const std::string& devices, const std::string& extra = "") const {
    auto job = ParseJobYaml(absl::StrCat("model: ", JoinPath(dir_, "model"), "\ndataset: ", JoinPath(dir_, "cache"),
                                         "\nlora: {rank: 4, targets: all-linear}\noptimizer: {lr: 0.01}\nsteps: 3\n"
                                         "batch_size: 4\nmicro_batches: 4\nschedule: 1f1b\nrecompute: true\nseed: 3\n"
                                         "dtype: fp32\ndevices: ",
                                         devices, "\n", extra));
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }
  void ExpectSameLora(const std::string& a_dir, const std::string& b_dir) const {
    auto a = test_util::LoadRunLora(JoinPath(dir_, a_dir)), b = test_util::LoadRunLora(JoinPath(dir_, b_dir));
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, t] : a) {
      ASSERT_TRUE(b.count(name)) << name;
      EXPECT_LE((t - b.at(name)).abs().max().item<double>(), 1e-4) << name;
    }
  }
  std::string dir_;
};

TEST_F(CudaCoordinatorTest, TwoStagesOnOneGpuGiveTheCpuRunsLora) {
  auto cpu = RunCoordinator(Job("[cpu, cpu]"), test_util::LocalStagesOptions(2, JoinPath(dir_, "cpu")));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = RunCoordinator(Job("[cuda:0, cuda:0]"), test_util::LocalStagesOptions(2, JoinPath(dir_, "gpu")));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->steps.size(), cpu->steps.size());
  for (size_t i = 0; i < cpu->steps.size(); ++i) {
    EXPECT_NEAR(gpu->steps[i].loss, cpu->steps[i].loss, 1e-5 * cpu->steps[i].loss) << "step " << i + 1;
  }
  ExpectSameLora("cpu", "gpu");
}

// The stage-local optimizer on the device (replica_exchange: allreduce): 2 replicas x 2 stages, all four on cuda:0
// (each stage's sum goes through host memory to Gloo and back; AdamW's moments live on the device), against the
// CPU's coordinator exchange, within the tolerance above.
TEST_F(CudaCoordinatorTest, TheAllreduceExchangeOnTheDeviceGivesTheCpuRunsLora) {
  CoordinatorOptions cpu_options = test_util::LocalStagesOptions(2, JoinPath(dir_, "cpu_r2"));
  cpu_options.replicas = 2;
  ASSERT_TRUE(RunCoordinator(Job("[cpu, cpu, cpu, cpu]", "replica_split: equal\n"), cpu_options).ok());
  CoordinatorOptions gpu_options = test_util::LocalStagesOptions(2, JoinPath(dir_, "gpu_allreduce"));
  gpu_options.replicas = 2;
  auto gpu = RunCoordinator(
      Job("[cuda:0, cuda:0, cuda:0, cuda:0]", "replica_split: equal\nreplica_exchange: allreduce\n"), gpu_options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectSameLora("cpu_r2", "gpu_allreduce");
}

}  // namespace
}  // namespace baton
