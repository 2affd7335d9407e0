// Compute devices: parsing "cpu | cuda | cuda:N" into an at::Device that exists on this machine, and a
// one-line description of what this build and machine offer (libtorch version, CUDA compiled in, devices).
// Baton is built against the CUDA-enabled libtorch everywhere; a machine without a GPU runs the CPU path and
// refuses cuda devices with a clear error instead of failing inside libtorch.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <string>

namespace baton {

// "cpu" (or empty) | "cuda" (= cuda:0) | "cuda:N". A CUDA device that this machine lacks is
// FAILED_PRECONDITION ("no CUDA device ..."); a malformed name is INVALID_ARGUMENT.
absl::StatusOr<at::Device> ParseDevice(const std::string& name);

// True when this binary was compiled and linked with libtorch's CUDA backend.
bool CudaCompiled();
// CUDA devices visible now (0 without a GPU or driver).
int CudaDeviceCount();

// e.g. "libtorch 2.15.0, CUDA 13.2 compiled in, 0 CUDA devices" (printed by --version and at start-up).
std::string BuildAndDeviceSummary();

// Makes a binary's --version print BuildAndDeviceSummary(). Call before absl::ParseCommandLine.
void InstallVersionFlag();

}  // namespace baton
