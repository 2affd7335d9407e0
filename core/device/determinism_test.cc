#include "core/device/determinism.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "core/device/device.h"

namespace baton {
namespace {

// Restores CUBLAS_WORKSPACE_CONFIG as it was when the test began.
class ScopedWorkspaceEnv {
 public:
  ScopedWorkspaceEnv() {
    const char* v = std::getenv(kName);
    if (v != nullptr) saved_ = v;
  }
  ~ScopedWorkspaceEnv() {
    if (saved_) {
      setenv(kName, saved_->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }
  static constexpr const char* kName = "CUBLAS_WORKSPACE_CONFIG";

 private:
  std::optional<std::string> saved_;
};

TEST(DeterminismTest, WorkspaceConfigIsSetOnlyWhereTheEnvironmentHasNone) {
  ScopedWorkspaceEnv restore;
  unsetenv(ScopedWorkspaceEnv::kName);
  PrepareCudaDeterminismEnv();
  ASSERT_NE(std::getenv(ScopedWorkspaceEnv::kName), nullptr);
  EXPECT_STREQ(std::getenv(ScopedWorkspaceEnv::kName), ":4096:8");

  setenv(ScopedWorkspaceEnv::kName, ":16:8", 1);
  PrepareCudaDeterminismEnv();
  EXPECT_STREQ(std::getenv(ScopedWorkspaceEnv::kName), ":16:8") << "an operator's own setting is kept";
}

TEST(DeterminismTest, OnTheCpuNothingChanges) {
  at::Context& ctx = at::globalContext();
  const bool algorithms = ctx.deterministicAlgorithms();
  const bool cudnn = ctx.deterministicCuDNN();
  const bool benchmark = ctx.benchmarkCuDNN();
  for (bool deterministic : {true, false, true}) {
    ApplyDeterminism(at::kCPU, deterministic);
    EXPECT_EQ(ctx.deterministicAlgorithms(), algorithms);
    EXPECT_EQ(ctx.deterministicCuDNN(), cudnn);
    EXPECT_EQ(ctx.benchmarkCuDNN(), benchmark);
  }
}

TEST(DeterminismTest, OnCudaTheSwitchesFollowTheJob) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "needs a CUDA device";
  at::Context& ctx = at::globalContext();
  const bool algorithms = ctx.deterministicAlgorithms(), cudnn = ctx.deterministicCuDNN();
  const bool benchmark = ctx.benchmarkCuDNN();
  ApplyDeterminism(at::Device(at::kCUDA, 0), true);
  EXPECT_TRUE(ctx.deterministicAlgorithms());
  EXPECT_FALSE(ctx.deterministicAlgorithmsWarnOnly()) << "an op without a deterministic kernel must fail";
  EXPECT_TRUE(ctx.deterministicCuDNN());
  EXPECT_FALSE(ctx.benchmarkCuDNN());
  ApplyDeterminism(at::Device(at::kCUDA, 0), false);
  EXPECT_FALSE(ctx.deterministicAlgorithms());
  EXPECT_FALSE(ctx.deterministicCuDNN());
  EXPECT_FALSE(ctx.benchmarkCuDNN());
  ctx.setDeterministicAlgorithms(algorithms, false);
  ctx.setDeterministicCuDNN(cudnn);
  ctx.setBenchmarkCuDNN(benchmark);
}

}  // namespace
}  // namespace baton
