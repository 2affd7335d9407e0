// The GEMM behind every frozen Linear on CPU. libtorch's at::matmul sends fp32 CPU GEMMs to MKL's sgemm, which
// on AMD CPUs takes a generic code path (2-2.5x slower than oneDNN's AVX-512 kernels at FLUX.2 shapes on the Zen 5
// bench machine; see BENCHMARKS.md "bench_vs_pytorch"). oneDNN ships inside libtorch and is reachable through
// the `mkldnn::_linear_pointwise` operator, which takes plain strided tensors (a transposed view as weight is
// fine), so the backward's x-gradient runs through it as well. Results differ from MKL's only by summation order.
// Anything that is not CPU fp32/bf16 with x and w of the same dtype keeps at::matmul.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <string>

namespace baton {

enum class CpuLinearBackend {
  kOnednn,  // oneDNN (mkldnn::_linear_pointwise) where it applies; the default when libtorch has oneDNN
  kAten,    // at::matmul everywhere (MKL sgemm on CPU), as eager PyTorch does
};

// Process-wide choice (set once at start-up, before any step; not synchronized with running steps).
void SetCpuLinearBackend(CpuLinearBackend backend);
CpuLinearBackend GetCpuLinearBackend();
// "onednn" | "aten" (bench flags); anything else is an InvalidArgument naming the allowed values.
absl::StatusOr<CpuLinearBackend> ParseCpuLinearBackend(const std::string& name);

// True when LinearNoBias would run x·wᵀ through oneDNN: backend kOnednn, libtorch built with oneDNN, x and w
// on CPU with the same dtype, fp32 or bf16 (bf16 where this CPU's oneDNN has a kernel for it: not without AVX-512).
bool UsesOnednn(const at::Tensor& x, const at::Tensor& w);

// x [..., in] · w [out, in]ᵀ → [..., out], no bias, no autograd graph of its own (callers that need gradients
// wrap it: see lora_linear_function.h). `w` may be any strided view, e.g. W.t() for a backward x·W.
at::Tensor LinearNoBias(const at::Tensor& x, const at::Tensor& w);

// x·wᵀ + other in one oneDNN call where UsesOnednn (other: [..., out], same dtype), else at::matmul + add.
at::Tensor LinearNoBiasAdd(const at::Tensor& x, const at::Tensor& w, const at::Tensor& other);

}  // namespace baton
