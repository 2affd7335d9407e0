// `coordinator --stages 2` with both stages on cuda:0 (job key devices: [cuda:0, cuda:0]) against the same job on
// the CPU: real stage_worker processes, gRPC on loopback, pinned uploads and downloads on the device path; and 2
// replicas with the stage-local optimizer on the device. SKIPS without a CUDA device.
//
// Tolerance: fp32 on both devices; the GPU reassociates sums, so losses and gradients differ by ~1e-6 relative
// (TF32 is off). AdamW divides each gradient element by its own running magnitude, so an element whose gradient
// is tiny (~1e-7 against typical ~1e-4) turns the same absolute error (~1e-10) into a larger step difference:
// lr · 1e-10 / 1e-7 = 1e-5 per step at lr 0.01. 1e-4 absolute on the LoRA after 3 steps covers that and is still
// 100x below one wrong step (a step moves an element by up to lr = 1e-2). No dropout: its masks come from each
// device's own generator. Every run is `coordinator` in a process of its own, as users and the GPU check run it: a
// run that finished (its LoRA and every train-log line written) and whose process then died is an exit-time crash,
// reported as such ("EXIT CRASH", test property exit_crash) while its results are still judged.
#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/data/cache.h"
#include "core/device/device.h"
#include "core/model/flux2_weights.h"
#include "core/testing/run_command.h"
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
  static std::string Job(const std::string& devices, const std::string& extra = "", int steps = 3,
                         const std::string& lora = "{rank: 4, targets: all-linear}") {
    return absl::StrCat("lora: ", lora, "\noptimizer: {lr: 0.01}\nsteps: ", steps,
                        "\n"
                        "batch_size: 4\nmicro_batches: 4\nschedule: 1f1b\nrecompute: true\nseed: 3\n"
                        "dtype: fp32\ndevices: ",
                        devices, "\n", extra);
  }
  // `coordinator --stages N --replicas R --job <out>/job.yaml --output <out>`; true when the run completed (exit 0, or
  // an exit-time crash after a complete run, which is reported and recorded).
  bool Run(const std::string& job_yaml, const std::string& out, int stages, int replicas = 1, size_t steps = 3,
           const std::string& flags = "") {
    const std::string out_dir = JoinPath(dir_, out);
    EXPECT_TRUE(MakeDirs(out_dir).ok());
    const std::string job_path = JoinPath(out_dir, "job.yaml");
    EXPECT_TRUE(WriteFileAtomic(job_path, absl::StrCat("model: ", JoinPath(dir_, "model"),
                                                       "\ndataset: ", JoinPath(dir_, "cache"), "\n", job_yaml))
                    .ok());
    const std::string cmd =
        absl::StrCat(JoinPath(test_util::BinDir(), "coordinator"), " --stages ", stages, " --replicas ", replicas,
                     " --job ", job_path, " --output ", out_dir, " --rpc_timeout_s 120 ", flags, "; echo \"exit=$?\"");
    const test_util::CommandResult r = test_util::RunCommand(cmd, /*with_stderr=*/true);
    const size_t at = r.output.rfind("exit=");
    const int code = at == std::string::npos ? -1 : std::atoi(r.output.c_str() + at + 5);
    const bool complete =
        test_util::ReadTrainLog(out_dir).size() == steps && PathExists(JoinPath(out_dir, "lora.safetensors"));
    if (code != 0 && complete) {
      std::printf("EXIT CRASH: %s finished its run, then exited with %d (128+signal: %d)\n", out.c_str(), code,
                  code > 128 ? code - 128 : 0);
      RecordProperty("exit_crash", code);
    }
    EXPECT_TRUE(complete) << cmd << " (exit " << code << ")\n" << r.output;
    return complete;
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
  for (const char* exchange : {"coordinator", "allreduce"}) {  // the optimizer in the coordinator, or on the device
    const std::string extra = absl::StrCat("replica_exchange: ", exchange, "\n");
    ASSERT_TRUE(Run(Job("[cpu, cpu]", extra), absl::StrCat("cpu_", exchange), 2));
    ASSERT_TRUE(Run(Job("[cuda:0, cuda:0]", extra), absl::StrCat("gpu_", exchange), 2));
    const auto cpu = test_util::ReadTrainLog(JoinPath(dir_, absl::StrCat("cpu_", exchange)));
    const auto gpu = test_util::ReadTrainLog(JoinPath(dir_, absl::StrCat("gpu_", exchange)));
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      const double want = cpu[i]["loss"].get<double>();
      EXPECT_NEAR(gpu[i]["loss"].get<double>(), want, 1e-5 * want) << exchange << " step " << i + 1;
      // The stages' own device time (CUDA events) and reserved peak, on the GPU run only.
      EXPECT_FALSE(cpu[i].contains("stage_device_busy_seconds"));
      ASSERT_TRUE(gpu[i].contains("stage_device_busy_seconds") && gpu[i].contains("stage_memory_reserved_bytes"))
          << gpu[i].dump();
      for (size_t s = 0; s < 2; ++s) {
        EXPECT_GT(gpu[i]["stage_device_busy_seconds"][s].get<double>(), 0.0) << gpu[i].dump();
        EXPECT_GE(gpu[i]["stage_memory_reserved_bytes"][s].get<int64_t>(),
                  gpu[i]["stage_memory_bytes"][s].get<int64_t>())
            << gpu[i].dump();
      }
    }
    ExpectSameLora(absl::StrCat("cpu_", exchange), absl::StrCat("gpu_", exchange));
  }
}

// A rollback on the device: a run stopped after its step-2 checkpoint and resumed to step 4 loads every stage's
// adapters and AdamW moments back onto cuda:0 (LoadState: the bulk upload, the moments moved beside the adapters
// before the next update) and ends as the run that never stopped (deterministic: the same kernels both times).
TEST_F(CudaCoordinatorTest, AResumeLoadsTheStagesStateBackOntoTheDevice) {
  const std::string extra = "replica_exchange: allreduce\ncheckpoint_every: 2\ndeterministic: true\n";
  ASSERT_TRUE(Run(Job("[cuda:0, cuda:0]", extra, 4), "straight", 2, 1, 4));
  ASSERT_TRUE(Run(Job("[cuda:0, cuda:0]", extra, 2), "resumed", 2, 1, 2));
  ASSERT_TRUE(Run(Job("[cuda:0, cuda:0]", extra, 4), "resumed", 2, 1, 4, "--resume"));
  auto a = test_util::LoadRunLora(JoinPath(dir_, "straight")), b = test_util::LoadRunLora(JoinPath(dir_, "resumed"));
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(at::equal(t, b.at(name))) << name;
}

// Every LoRA type on the device: DoRA's magnitudes and norms, LoHa's Hadamard product of two low-rank products and
// LoKr's Kronecker product (never built: w1·X·w2ᵀ) train on cuda:0 as on the CPU, through 2 stages with the stage-local
// optimizer, and read back (the saved LoRA: diffusers naming for DoRA, LyCORIS for LoHa and LoKr) within the
// tolerance above.
TEST_F(CudaCoordinatorTest, EachLoraTypeTrainsOnTheDeviceAsOnTheCpu) {
  for (const char* type : {"dora", "loha", "lokr"}) {
    const std::string lora = absl::StrCat("{rank: 4, targets: all-linear, type: ", type, "}");
    const std::string extra = "replica_exchange: allreduce\n";
    ASSERT_TRUE(Run(Job("[cpu, cpu]", extra, 3, lora), absl::StrCat("cpu_", type), 2));
    ASSERT_TRUE(Run(Job("[cuda:0, cuda:0]", extra, 3, lora), absl::StrCat("gpu_", type), 2));
    ExpectSameLora(absl::StrCat("cpu_", type), absl::StrCat("gpu_", type));
  }
}

// The stage-local optimizer on the device (replica_exchange: allreduce): 2 replicas x 2 stages, all four on cuda:0
// (each stage's sum goes through host memory to Gloo and back; AdamW's moments live on the device), against the
// CPU's coordinator exchange, within the tolerance above.
TEST_F(CudaCoordinatorTest, TheAllreduceExchangeOnTheDeviceGivesTheCpuRunsLora) {
  ASSERT_TRUE(
      Run(Job("[cpu, cpu, cpu, cpu]", "replica_split: equal\nreplica_exchange: coordinator\n"), "cpu_r2", 2, 2));
  ASSERT_TRUE(Run(Job("[cuda:0, cuda:0, cuda:0, cuda:0]", "replica_split: equal\nreplica_exchange: allreduce\n"),
                  "gpu_allreduce", 2, 2));
  ExpectSameLora("cpu_r2", "gpu_allreduce");
}

}  // namespace
}  // namespace baton
