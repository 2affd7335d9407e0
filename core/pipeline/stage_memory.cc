#include "core/pipeline/stage_memory.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "core/model/flux2_model.h"

namespace baton {

absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view text) {
  if (text == "auto") return RecomputePolicy::kAuto;
  if (text == "true") return RecomputePolicy::kAll;
  if (text == "false") return RecomputePolicy::kNone;
  return absl::InvalidArgumentError(absl::StrCat(
      "recompute: '", text,
      "' is not one of auto (the planner recomputes blocks only where a stage needs it), true (every block), false"));
}

std::string RecomputePolicyName(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::kNone:
      return "false";
    case RecomputePolicy::kAll:
      return "true";
    case RecomputePolicy::kAuto:
      return "auto";
  }
  return "auto";
}

absl::StatusOr<PlanDevice> ParsePlanDevice(absl::string_view text) {
  if (text == "cpu") return PlanDevice::kCpu;
  if (text == "cuda" || absl::StartsWith(text, "cuda:")) return PlanDevice::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("device: '", text, "' is not one of cpu, cuda, cuda:N"));
}

std::string PlanDeviceName(PlanDevice device) { return device == PlanDevice::kCpu ? "cpu" : "cuda"; }

int64_t DeviceProcessBytes(PlanDevice device) {
  return device == PlanDevice::kCpu ? kCpuProcessBytes : kCudaProcessBytes;
}

FrozenSizes ComputeFrozenSizes(const Flux2Config& config, WeightQuant quantize, int compute_bytes) {
  FrozenSizes s;
  s.block_params.assign(config.num_blocks(), 0);
  s.block_bytes.assign(config.num_blocks(), 0);
  const bool q = quantize != WeightQuant::kNone;
  for (const auto& [name, shape] : Flux2ParameterShapes(config)) {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    const int64_t bytes = FrozenParamBytes(shape, q && IsQuantizedFlux2Param(name, shape), compute_bytes);
    int64_t block = -1;
    for (const auto& [prefix, offset] : {std::pair<absl::string_view, int64_t>{"transformer_blocks.", 0},
                                         {"single_transformer_blocks.", config.num_layers}}) {
      if (!absl::StartsWith(name, prefix)) continue;
      const std::vector<absl::string_view> parts = absl::StrSplit(absl::string_view(name).substr(prefix.size()), '.');
      int64_t i = 0;
      if (!parts.empty() && absl::SimpleAtoi(parts[0], &i)) block = offset + i;
    }
    if (block >= 0 && block < config.num_blocks()) {
      s.block_params[block] += elements;
      s.block_bytes[block] += bytes;
    } else if (absl::StartsWith(name, "x_embedder.") || absl::StartsWith(name, "context_embedder.")) {
      s.embed_params += elements;
      s.embed_bytes += bytes;
    } else if (absl::StartsWith(name, "proj_out.")) {
      s.head_params += elements;
      s.head_bytes += bytes;
    }  // else: the shell (time/guidance embedding, modulations, norm_out.linear) runs on the coordinator
  }
  return s;
}

}  // namespace baton
