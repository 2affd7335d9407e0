#include "core/lora/cpu_linear.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <absl/strings/str_cat.h>

#include <atomic>
#include <optional>
#include <string_view>

namespace baton {
namespace {

std::atomic<CpuLinearBackend> g_backend{CpuLinearBackend::kOnednn};

// mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr, Scalar?[] scalars, str? algorithm)
at::Tensor CallLinearPointwise(const at::Tensor& x, const at::Tensor& w) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, std::string_view,
                            c10::List<std::optional<at::Scalar>>, std::optional<std::string_view>)>();
  return op.call(x, w, std::nullopt, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

// mkldnn::_linear_pointwise.binary(Tensor X, Tensor other, Tensor W, Tensor? B, str attr): X·Wᵀ (+) other.
at::Tensor CallLinearPointwiseAdd(const at::Tensor& x, const at::Tensor& other, const at::Tensor& w) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_linear_pointwise", "binary")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               const std::optional<at::Tensor>&, std::string_view)>();
  return op.call(x, other, w, std::nullopt, "add");
}

// Whether this CPU's oneDNN runs a bf16 inner product at all: on a CPU without AVX-512 (an AVX2-only EPYC, say) it
// finds no kernel for one and throws; libtorch's at::matmul then runs it (its own bf16 path). Probed once.
bool OnednnRunsBf16() {
  static const bool runs = [] {
    try {
      CallLinearPointwise(at::ones({1, 32}, at::kBFloat16), at::ones({16, 32}, at::kBFloat16));
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }();
  return runs;
}

}  // namespace

void SetCpuLinearBackend(CpuLinearBackend backend) { g_backend.store(backend); }
CpuLinearBackend GetCpuLinearBackend() { return g_backend.load(); }

absl::StatusOr<CpuLinearBackend> ParseCpuLinearBackend(const std::string& name) {
  if (name == "onednn") return CpuLinearBackend::kOnednn;
  if (name == "aten") return CpuLinearBackend::kAten;
  return absl::InvalidArgumentError(absl::StrCat("unknown CPU linear backend '", name, "' (allowed: onednn, aten)"));
}

bool UsesOnednn(const at::Tensor& x, const at::Tensor& w) {
  static const bool available = at::hasMKLDNN();
  if (!available || g_backend.load() != CpuLinearBackend::kOnednn) return false;
  if (!x.device().is_cpu() || !w.device().is_cpu() || x.scalar_type() != w.scalar_type()) return false;
  return x.scalar_type() == at::kFloat || (x.scalar_type() == at::kBFloat16 && OnednnRunsBf16());
}

at::Tensor LinearNoBias(const at::Tensor& x, const at::Tensor& w) {
  if (UsesOnednn(x, w)) return CallLinearPointwise(x, w);
  return at::matmul(x, w.t());
}

at::Tensor LinearNoBiasAdd(const at::Tensor& x, const at::Tensor& w, const at::Tensor& other) {
  if (UsesOnednn(x, w) && other.scalar_type() == x.scalar_type() && other.device().is_cpu()) {
    return CallLinearPointwiseAdd(x, other, w);
  }
  return at::matmul(x, w.t()) + other;
}

}  // namespace baton
