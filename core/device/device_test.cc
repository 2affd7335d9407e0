#include "core/device/device.h"

#include <gtest/gtest.h>
#include <torch/version.h>

#include <string>

namespace baton {
namespace {

TEST(DeviceTest, ParseDeviceSaysWhatIsWrong) {
  EXPECT_EQ(ParseDevice("cpu")->type(), at::kCPU);
  EXPECT_EQ(ParseDevice("")->type(), at::kCPU);
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cudax", "cuda:0:1", "CPU", " cpu"}) {
    auto device = ParseDevice(bad);
    EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(device.status().message().find("cpu, cuda or cuda:N"), std::string::npos) << device.status();
  }
  if (CudaDeviceCount() == 0) {
    for (const char* absent : {"cuda", "cuda:0", "cuda:3"}) {
      auto device = ParseDevice(absent);
      EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition) << absent;
      EXPECT_NE(device.status().message().find(CudaCompiled() ? "no CUDA device" : "no CUDA support"),
                std::string::npos)
          << device.status();
      EXPECT_NE(device.status().message().find(absent), std::string::npos) << "names the device: " << device.status();
    }
  } else {
    EXPECT_EQ(*ParseDevice("cuda"), at::Device(at::kCUDA, 0));
    EXPECT_EQ(*ParseDevice("cuda:0"), at::Device(at::kCUDA, 0));
    auto past = ParseDevice("cuda:" + std::to_string(CudaDeviceCount()));
    EXPECT_EQ(past.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(past.status().message().find("no such CUDA device"), std::string::npos) << past.status();
  }
}

TEST(DeviceTest, SummaryNamesLibtorchAndCountsTheDevices) {
  const std::string summary = BuildAndDeviceSummary();
  EXPECT_EQ(summary.rfind(std::string("libtorch ") + TORCH_VERSION + ", ", 0), 0u) << summary;
  if (!CudaCompiled()) {
    EXPECT_NE(summary.find("no CUDA"), std::string::npos) << summary;
    return;
  }
  const int n = CudaDeviceCount();
  EXPECT_GE(n, 0);
  const std::string devices = std::to_string(n) + (n == 1 ? " CUDA device" : " CUDA devices");
  EXPECT_NE(summary.find(" compiled in, " + devices), std::string::npos) << summary;
  EXPECT_EQ(summary.substr(summary.size() - devices.size()), devices) << summary;
}

}  // namespace
}  // namespace baton
