#include "core/device/determinism.h"

#include <cstdlib>

namespace baton {

void PrepareCudaDeterminismEnv() {
  // cuBLAS picks its workspace per stream; with more than one workspace configuration its split-K reductions can
  // differ run to run. ":4096:8" (8 buffers of 4 MiB) is the setting NVIDIA documents for reproducibility.
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
}

void ApplyDeterminism(at::Device device, bool deterministic) {
  if (!device.is_cuda()) return;
  at::Context& ctx = at::globalContext();
  // Not warn-only: an op without a deterministic CUDA kernel fails naming itself, instead of silently breaking
  // the bitwise promises. SDPA's fused backward kernels take the deterministic path under this switch.
  ctx.setDeterministicAlgorithms(deterministic, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(deterministic);
  ctx.setBenchmarkCuDNN(false);  // autotuning picks kernels by timing: another choice on another run
  // The deterministic mode would also fill every at::empty with NaN, a pass over memory per allocation; Baton writes
  // every tensor it allocates, so it buys nothing here.
  ctx.setDeterministicFillUninitializedMemory(false);
}

}  // namespace baton
