#include "stage_worker/configure_checks.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>

#include <cmath>

#include "core/device/device.h"
#include "core/train/common.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr size_t kMaxIdBytes = 256;
constexpr int32_t kMaxStages = 1024;
constexpr int32_t kMaxMicroBatches = 1 << 16;
constexpr int32_t kMaxThreads = 1024;
constexpr int32_t kMaxLoraRank = 4096;

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat("Configure: ", what)); }

absl::Status CheckScalars(const v1::ConfigureRequest& req) {
  if (req.job_id().empty()) return Bad("job_id is empty");
  if (req.job_id().size() > kMaxIdBytes || req.config_hash().size() > kMaxIdBytes ||
      req.job_name().size() > kMaxIdBytes) {
    return Bad(absl::StrCat("job_id, config_hash and job_name must be at most ", kMaxIdBytes, " bytes"));
  }
  if (req.num_stages() < 1 || req.num_stages() > kMaxStages || req.stage_index() < 0 ||
      req.stage_index() >= req.num_stages()) {
    return Bad(absl::StrCat("stage_index ", req.stage_index(), " of ", req.num_stages(), " stages"));
  }
  if (req.micro_batches() < 1 || req.micro_batches() > kMaxMicroBatches) {
    return Bad(absl::StrCat("micro_batches ", req.micro_batches(), " is outside [1, ", kMaxMicroBatches, "]"));
  }
  if (req.threads() < 0 || req.threads() > kMaxThreads) {
    return Bad(absl::StrCat("threads ", req.threads(), " is outside [0, ", kMaxThreads, "]"));
  }
  if (req.recompute_blocks() < 0) return Bad(absl::StrCat("recompute_blocks ", req.recompute_blocks(), " < 0"));
  const v1::LoraSpec& lora = req.lora();
  if (lora.rank() < 1 || lora.rank() > kMaxLoraRank) {
    return Bad(absl::StrCat("LoRA rank ", lora.rank(), " is outside [1, ", kMaxLoraRank, "]"));
  }
  if (!std::isfinite(lora.alpha()) || lora.alpha() <= 0) return Bad(absl::StrCat("LoRA alpha ", lora.alpha()));
  if (lora.lokr_factor() < -1) return Bad(absl::StrCat("LoKr factor ", lora.lokr_factor()));
  if (!(lora.dropout() >= 0 && lora.dropout() < 1)) {
    return Bad(absl::StrCat("LoRA dropout ", lora.dropout(), " is outside [0, 1)"));
  }
  for (const std::string& t : lora.targets()) {
    if (t.empty() || t.size() > kMaxIdBytes) return Bad("a LoRA target is empty or longer than 256 bytes");
  }
  if (!req.next_address().empty()) RETURN_IF_ERROR(CheckPeerAddress(req.next_address(), "Configure: next_address"));
  if (!req.prev_address().empty()) RETURN_IF_ERROR(CheckPeerAddress(req.prev_address(), "Configure: prev_address"));
  return absl::OkStatus();
}

// The chunks a request configures: its `chunks`, or the one range of its top-level fields.
absl::StatusOr<std::vector<StageRange>> RequestedRanges(const v1::ConfigureRequest& req, const ModelFamily& c) {
  std::vector<StageRange> ranges;
  if (req.chunks().empty()) {
    ranges.push_back({req.block_begin(), req.block_end(), req.has_embedders(), req.has_head()});
  }
  if (req.chunks_size() > c.num_blocks()) {
    return Bad(absl::StrCat(req.chunks_size(), " chunks but the model has ", c.num_blocks(), " blocks"));
  }
  for (const v1::StageChunk& ch : req.chunks()) {
    ranges.push_back({ch.block_begin(), ch.block_end(), ch.has_embedders(), ch.has_head()});
  }
  for (size_t k = 0; k < ranges.size(); ++k) {
    const StageRange& r = ranges[k];
    const std::string what = req.chunks().empty() ? "" : absl::StrCat(" of chunk ", k);
    if (r.block_begin < 0 || r.block_begin >= r.block_end || r.block_end > c.num_blocks()) {
      return Bad(absl::StrCat("block range", what, " [", r.block_begin, ", ", r.block_end,
                              ") is not inside the model's ", c.num_blocks(), " blocks"));
    }
    // Every chunk's output goes somewhere and every input gradient too (interleaved: the neighbours wrap).
    if (!r.has_head && req.next_address().empty()) {
      return Bad(absl::StrCat("chunk ", k, " has no head but next_address is empty"));
    }
    if (!r.has_embedders && req.prev_address().empty()) {
      return Bad(absl::StrCat("chunk ", k, " has no embedders but prev_address is empty"));
    }
  }
  return ranges;
}

// Opens the model named by the request, from inside `root` only (every file it maps, shards included).
absl::StatusOr<std::unique_ptr<ModelFamily>> OpenModelInsideRoot(const v1::ConfigureRequest& req,
                                                                 const std::string& root) {
  const std::string hint = " (stage_worker --model_root)";
  if (req.model_path().empty()) return Bad("model_path is empty");
  auto model = ResolveInsideRoot(root, req.model_path(), "model path");
  if (!model.ok()) return Annotate(model.status(), absl::StrCat("Configure", hint));
  std::string config;
  if (!req.model_config_path().empty()) {
    auto resolved = ResolveInsideRoot(root, req.model_config_path(), "model config path");
    if (!resolved.ok()) return Annotate(resolved.status(), absl::StrCat("Configure", hint));
    config = *resolved;
  }
  auto family = OpenModel(*model, config);
  if (!family.ok()) return Annotate(family.status(), "Configure: opening the model on this worker");
  for (const std::string& file : (*family)->WeightFiles()) {
    auto inside = ResolveInsideRoot(root, file, "model file");
    if (!inside.ok()) return Annotate(inside.status(), absl::StrCat("Configure", hint));
  }
  return family;
}

}  // namespace

absl::Status CheckPeerAddress(const std::string& address, absl::string_view field) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (address.size() > kMaxIdBytes || colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " '", address.substr(0, kMaxIdBytes), "' is not host:port (port 1..65535)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PreparedStage> PrepareConfigure(const v1::ConfigureRequest& req, const std::string& model_root,
                                               const std::string& default_device) {
  RETURN_IF_ERROR(CheckScalars(req));
  PreparedStage out;
  ASSIGN_OR_RETURN(out.dtype, ParseDtype(req.dtype().empty() ? "fp32" : req.dtype()));
  auto device = ParseDevice(req.device().empty() ? default_device : req.device());
  if (!device.ok()) return Annotate(device.status(), "Configure");
  out.device = *device;
  ASSIGN_OR_RETURN(out.wire, ParseWireDtype(req.wire_dtype().empty() ? "none" : req.wire_dtype()));
  ASSIGN_OR_RETURN(out.quant, ParseWeightQuant(req.quantize().empty() ? "none" : req.quantize()));
  ASSIGN_OR_RETURN(out.model, OpenModelInsideRoot(req, model_root));
  ASSIGN_OR_RETURN(out.ranges, RequestedRanges(req, *out.model));
  out.lora.rank = req.lora().rank();
  out.lora.alpha = req.lora().alpha();
  out.lora.targets.assign(req.lora().targets().begin(), req.lora().targets().end());
  out.lora.dropout = req.lora().dropout();
  out.lora.seed = req.seed();
  ASSIGN_OR_RETURN(out.lora.type, ParseAdapterType(req.lora().type().empty() ? "lora" : req.lora().type()));
  out.lora.lokr_factor = req.lora().lokr_factor() == 0 ? -1 : req.lora().lokr_factor();
  // The adapters' math: fp32 (empty: what a coordinator that predates the field means) or the compute dtype.
  ASSIGN_OR_RETURN(out.lora.dtype, ParseDtype(req.lora().dtype().empty() ? "fp32" : req.lora().dtype()));
  if (out.lora.dtype != at::kFloat && out.lora.dtype != out.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("Configure: LoRA dtype ", req.lora().dtype(),
                                                   " is neither fp32 nor the compute dtype ", req.dtype()));
  }
  return out;
}

}  // namespace baton
