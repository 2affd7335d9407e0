// The binaries are the CUDA build of libtorch's (not a CPU-only fallback), and on a machine without a GPU they
// say so plainly: `stage_worker --device cuda:0` exits non-zero with "no CUDA device", never a crash or a hang.
#include <gtest/gtest.h>

#include <string>

#include "core/device/device.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::RunCommand;

// The shared libraries a binary was linked against (its DT_NEEDED entries).
std::string Needed(const std::string& binary) {
  return RunCommand("readelf -d " + BinDir() + "/" + binary + " | grep NEEDED").output;
}

TEST(CudaBuildTest, BinariesLinkLibtorchCuda) {
  ASSERT_TRUE(CudaCompiled()) << "configured without libtorch's CUDA backend: " << BuildAndDeviceSummary();
  // `baton` itself links no libtorch (light_client_test.cc); its model tools run in baton-tools.
  for (const char* binary : {"stage_worker", "coordinator", "baton-tools", "encoder_worker"}) {
    const std::string needed = Needed(binary);
    EXPECT_NE(needed.find("libtorch_cuda.so"), std::string::npos) << binary << " links:\n" << needed;
  }
  // The stage worker calls libtorch's CUDA stream API itself (side-stream uploads, core/device/transfer.h).
  EXPECT_NE(Needed("stage_worker").find("libc10_cuda.so"), std::string::npos);
  // The CUDA libraries resolve at run time (the wheel's nvidia/* libraries through libtorch's RUNPATH).
  auto ldd = RunCommand("ldd " + BinDir() + "/stage_worker");
  EXPECT_EQ(ldd.output.find("not found"), std::string::npos) << ldd.output;
}

TEST(CudaBuildTest, VersionNamesLibtorchAndCuda) {
  auto version = RunCommand("timeout 60 " + BinDir() + "/stage_worker --version", /*with_stderr=*/true);
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_NE(version.output.find("libtorch 2."), std::string::npos) << version.output;
  EXPECT_NE(version.output.find("compiled in"), std::string::npos) << version.output;
}

TEST(CudaBuildTest, StageWorkerRefusesAMissingCudaDevice) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device; the refusal is for GPU-less machines";
  // `timeout` turns a hang into exit 124; a crash would be a signal (exit code -1 here).
  auto run = RunCommand("timeout 60 " + BinDir() + "/stage_worker --listen 127.0.0.1:0 --device cuda:0", true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("no CUDA device"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("LISTENING"), std::string::npos) << "it must not serve: " << run.output;
}

}  // namespace
}  // namespace baton
