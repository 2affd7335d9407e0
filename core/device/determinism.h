// Deterministic execution on CUDA: the switch behind Baton's bitwise promises there (a redone step equals the
// step it replaces, a resume equals the run that never stopped, recompute equals the stored graph). On CPU
// libtorch's kernels are deterministic already and nothing here changes them. docs/failure-semantics.md says
// which promises hold under each setting.
#pragma once

#include <ATen/ATen.h>

namespace baton {

// Sets CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the environment already has it. Call before anything touches CUDA:
// cuBLAS reads it when CUDA initializes, so every main calls this first.
void PrepareCudaDeterminismEnv();

// Applies the job's choice for computation on `device` (process-wide, as libtorch's switches are): on CUDA,
// deterministic algorithms and cuDNN settings on or off; on CPU nothing. On CUDA the job key `deterministic: true`
// (the default) makes libtorch choose deterministic kernels (or fail naming an op that has none), cuDNN
// deterministic without autotuning, and cuBLAS reproducible via CUBLAS_WORKSPACE_CONFIG
// (PrepareCudaDeterminismEnv).
void ApplyDeterminism(at::Device device, bool deterministic);

}  // namespace baton
