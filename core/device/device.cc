#include "core/device/device.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <absl/flags/usage_config.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>
#include <torch/cuda.h>
#include <torch/version.h>

namespace baton {

bool CudaCompiled() {
#ifdef BATON_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount() {
  // torch::cuda::device_count() asks the CUDA runtime; without a driver it answers 0 (no throw).
  return static_cast<int>(torch::cuda::device_count());
}

absl::StatusOr<at::Device> ParseDevice(const std::string& name) {
  if (name.empty() || name == "cpu") return at::Device(at::kCPU);
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, "cuda")) {
    return absl::InvalidArgumentError(absl::StrCat("unknown device '", name, "' (cpu, cuda or cuda:N)"));
  }
  int index = 0;
  if (!rest.empty() && (!absl::ConsumePrefix(&rest, ":") || !absl::SimpleAtoi(rest, &index) || index < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown device '", name, "' (cpu, cuda or cuda:N)"));
  }
  if (!CudaCompiled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", name, ": this build of Baton has no CUDA support (libtorch without CUDA)"));
  }
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", name, ": no CUDA device on this machine (the CUDA runtime sees none; is there a GPU ",
                     "and an NVIDIA driver?)"));
  }
  if (index >= count) {
    return absl::FailedPreconditionError(absl::StrCat("device ", name, ": no such CUDA device (this machine has ",
                                                      count, ", cuda:0..cuda:", count - 1, ")"));
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string BuildAndDeviceSummary() {
  std::string cuda = "no CUDA";
  if (CudaCompiled()) {
    // The CUDA runtime libtorch was built with (through its hooks: no direct CUDA call from Baton's code).
    const long runtime = at::detail::getCUDAHooks().versionCUDART();
    const int devices = CudaDeviceCount();
    cuda = absl::StrCat("CUDA ", runtime / 1000, ".", (runtime % 1000) / 10, " compiled in, ", devices, " CUDA device",
                        devices == 1 ? "" : "s");
  }
  return absl::StrCat("libtorch ", TORCH_VERSION, ", ", cuda);
}

void InstallVersionFlag() {
  absl::FlagsUsageConfig config = absl::flags_internal::GetUsageConfig();  // keep --help's filters
  config.version_string = [] { return BuildAndDeviceSummary() + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace baton
