#include "core/train/common.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <limits>
#include <vector>

#include "core/device/bulk_copy.h"
#include "core/lora/adapter_file.h"
#include "core/lora/lora.h"
#include "core/tensor/safetensors.h"
#include "core/train/optimizer.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "core/util/write_fault.h"

namespace baton {

absl::StatusOr<at::ScalarType> ParseDtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "fp16" || name == "float16") return at::kHalf;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "' (fp32, bf16 or fp16)"));
}

at::Tensor FlowMatchingLoss(const at::Tensor& pred, const at::Tensor& target, const at::Tensor& loss_mask,
                            const at::Tensor& weighting) {
  at::Tensor squared = (pred.to(at::kFloat) - target.to(pred.device(), at::kFloat)).pow(2);
  if (weighting.defined()) {
    std::vector<int64_t> per_sample(squared.dim(), 1);
    per_sample[0] = squared.size(0);
    squared = squared * weighting.to(pred.device(), at::kFloat).view(per_sample);
  }
  if (!loss_mask.defined()) return squared.mean();
  at::Tensor mask = loss_mask.to(pred.device(), at::kFloat).expand_as(squared);
  // Each record's weighted mean over its own elements, then the mean over the records: a record's share of the step
  // does not depend on its micro-batch-mates' masks (nor on how the batch is cut into micro-batches), and with every
  // weight 1 it is the unmasked mean.
  std::vector<int64_t> within(squared.dim() - 1);
  for (size_t d = 0; d < within.size(); ++d) within[d] = static_cast<int64_t>(d) + 1;
  return ((squared * mask).sum(within) / mask.sum(within).clamp_min(std::numeric_limits<float>::min())).mean();
}

at::Tensor LossWeighting(const std::string& scheme, const at::Tensor& sigmas) {
  const at::Tensor s = sigmas.to(at::kFloat);
  if (scheme == "sigma_sqrt") return s.pow(-2.0);
  if (scheme == "cosmap") return 2.0 / (M_PI * (1.0 - 2.0 * s + 2.0 * s.pow(2)));
  return at::Tensor();
}

absl::StatusOr<std::unique_ptr<JsonlWriter>> JsonlWriter::Open(const std::string& path, bool append) {
  auto w = std::make_unique<JsonlWriter>();
  w->path_ = path;
  w->file_ = std::fopen(path.c_str(), append ? "ae" : "we");  // e: O_CLOEXEC, kept from forked workers
  if (!w->file_) return absl::InternalError(absl::StrCat("cannot open ", path, " for writing"));
  return w;
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<JsonlWriter>> OpenTrainLog(const std::string& output_dir, bool append) {
  ASSIGN_OR_RETURN(auto log, JsonlWriter::Open(JoinPath(output_dir, "train_log.jsonl"), append));
  ASSIGN_OR_RETURN(auto tensorboard, TensorBoardWriter::Open(JoinPath(output_dir, kTensorBoardSubdir)));
  log->MirrorTo(std::move(tensorboard));
  return log;
}

absl::Status JsonlWriter::Append(const nlohmann::ordered_json& line) {
  std::string text = line.dump() + "\n";
  if (absl::Status fault = WriteFault(path_); !fault.ok()) {  // tests: as a full disk would, half the line lands
    std::fwrite(text.data(), 1, text.size() / 2, file_);
    std::fflush(file_);
    return Annotate(fault, absl::StrCat("cannot write ", path_));
  }
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path_));
  }
  return tensorboard_ ? tensorboard_->Record(line) : absl::OkStatus();
}

namespace {

// <dir>/<stem>.safetensors and, with save_bfl, <dir>/bfl/<stem>_bfl.safetensors.
absl::Status SaveLoraFiles(const std::string& dir, const std::string& stem,
                           const std::map<std::string, at::Tensor>& params, const JobConfig& job,
                           const std::map<std::string, std::string>& meta, const ModelFamily& model) {
  const bool lycoris = job.lora.type == AdapterType::kLoha || job.lora.type == AdapterType::kLokr;
  const std::string path = JoinPath(dir, stem + ".safetensors");
  RETURN_IF_ERROR(lycoris ? SaveLycoris(path, params, job.lora, meta)
                          : SaveLoraDiffusers(path, params, job.lora, meta));
  if (job.save_bfl) {
    // In a subfolder: diffusers' load_lora_weights(dir) guesses among the folder's top-level .safetensors files.
    RETURN_IF_ERROR(MakeDirs(JoinPath(dir, kBflLoraSubdir)));
    // alpha/r folded into the linear factor (lora_B, hada_w1_a, lokr_w1) under the PEFT names, then the family's
    // original naming (FLUX.2: BFL, fused qkv).
    const double scale = job.lora.alpha / static_cast<double>(job.lora.rank);
    const std::string linear = absl::StrCat(".", LinearFactorName(job.lora.type));
    std::map<std::string, at::Tensor> folded;
    for (const auto& [name, t] : params) {
      at::Tensor v = t.detach().to(at::kFloat).cpu();
      folded[name] = absl::EndsWith(name, linear) && scale != 1.0 ? v * scale : v;
    }
    ASSIGN_OR_RETURN(auto original, model.LoraToOriginalNames(folded));
    RETURN_IF_ERROR(WriteSafetensors(JoinPath(JoinPath(dir, kBflLoraSubdir), stem + "_bfl.safetensors"), original,
                                     LoraFileMetadata(job.lora, meta)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveLoraOutputs(const std::string& dir, const std::map<std::string, at::Tensor>& params,
                             const JobConfig& job, int64_t step, const ModelFamily& model,
                             const std::map<std::string, at::Tensor>& optimizer_state) {
  RETURN_IF_ERROR(MakeDirs(dir));
  std::map<std::string, std::string> meta = {
      {"software", "baton"}, {"baton_step", std::to_string(step)}, {"baton_job_hash", JobHash(job)}};
  RETURN_IF_ERROR(SaveLoraFiles(dir, "lora", params, job, meta, model));
  std::map<std::string, at::Tensor> ema;
  for (const auto& [name, t] : params) {
    auto it = optimizer_state.find(EmaKey(name));
    if (it != optimizer_state.end()) ema[name] = it->second.detach().to(at::kCPU);
  }
  if (ema.empty()) return absl::OkStatus();
  if (ema.size() != params.size()) {
    return absl::InternalError(absl::StrCat("the EMA covers ", ema.size(), " of ", params.size(), " adapters"));
  }
  meta["baton_ema_decay"] = absl::StrCat(job.optimizer.ema.decay);
  return SaveLoraFiles(dir, "lora_ema", ema, job, meta, model);
}

absl::Status CheckLoraOutputsPossible(const JobConfig& job, const ModelFamily& model) {
  return job.save_bfl ? Annotate(model.CheckOriginalNaming(job.lora), job.source) : absl::OkStatus();
}

std::map<std::string, at::Tensor> CloneToCpuFloat(const std::map<std::string, at::Tensor>& tensors) {
  return DownloadAll(tensors, at::kFloat);
}

}  // namespace baton
