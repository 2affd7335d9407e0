#include "core/train/common.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include "core/lora/lora.h"
#include "core/quant/quantize_module.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<at::ScalarType> ParseDtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "fp16" || name == "float16") return at::kHalf;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "' (fp32, bf16 or fp16)"));
}

absl::StatusOr<Flux2Stage> BuildFlux2Stage(const Flux2Checkpoint& checkpoint, const Flux2StageRange& range,
                                           at::ScalarType dtype, at::Device device, const LoraSpec* lora, bool train,
                                           WeightQuant quant) {
  ASSIGN_OR_RETURN(const WeightQuant storage, ResolveWeightQuant(quant, checkpoint));
  // An 8-bit stage is built on the CPU, where the full-precision tensors it drops unwritten never became
  // resident (large allocations are lazily mapped pages), then moved: built on a GPU they would have been
  // real allocations of the whole stage in full precision.
  const at::Device build_device = storage == WeightQuant::kNone ? device : at::Device(at::kCPU);
  Flux2Stage stage{nullptr};
  RETURN_IF_ERROR(TorchCall("building the stage", [&] {
    stage = Flux2Stage(checkpoint.config(), range, at::TensorOptions().dtype(dtype).device(build_device));
    UseQuantizedFlux2Weights(*stage, storage);
  }));
  RETURN_IF_ERROR(LoadFlux2Weights(*stage, checkpoint));  // the rest: norms, embedders, head
  RETURN_IF_ERROR(LoadQuantizedFlux2Weights(*stage, checkpoint));
  if (build_device != device) RETURN_IF_ERROR(TorchCall("moving the stage", [&] { stage->to(device); }));
  if (lora) {
    ASSIGN_OR_RETURN(int attached, AttachLora(*stage, *lora));
    (void)attached;  // a stage may legitimately hold no targeted Linear (e.g. only embedders)
  }
  stage->train(train);
  return stage;
}

absl::StatusOr<Flux2Shell> BuildFlux2Shell(const Flux2Checkpoint& checkpoint, at::ScalarType dtype, at::Device device) {
  Flux2Shell shell{nullptr};
  RETURN_IF_ERROR(TorchCall("building the shell", [&] {
    shell = Flux2Shell(checkpoint.config(), at::TensorOptions().dtype(dtype).device(device));
  }));
  RETURN_IF_ERROR(LoadFlux2Weights(*shell, checkpoint));
  shell->eval();
  return shell;
}

at::Tensor FlowMatchingLoss(const at::Tensor& pred, const at::Tensor& target) {
  return (pred.to(at::kFloat) - target.to(pred.device(), at::kFloat)).pow(2).mean();
}

absl::StatusOr<std::unique_ptr<JsonlWriter>> JsonlWriter::Open(const std::string& path, bool append) {
  auto w = std::make_unique<JsonlWriter>();
  w->path_ = path;
  w->file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!w->file_) return absl::InternalError(absl::StrCat("cannot open ", path, " for writing"));
  return w;
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

absl::Status JsonlWriter::Append(const nlohmann::ordered_json& line) {
  std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path_));
  }
  return absl::OkStatus();
}

absl::Status SaveLoraOutputs(const std::string& dir, const std::map<std::string, at::Tensor>& params,
                             const JobConfig& job, int64_t step) {
  RETURN_IF_ERROR(MakeDirs(dir));
  std::map<std::string, std::string> meta = {
      {"software", "baton"}, {"baton_step", std::to_string(step)}, {"baton_job_hash", JobHash(job)}};
  RETURN_IF_ERROR(SaveLoraDiffusers(JoinPath(dir, "lora.safetensors"), params, job.lora, meta));
  if (job.save_bfl) {
    // In a subfolder: diffusers' load_lora_weights(dir) guesses among the folder's top-level .safetensors files.
    RETURN_IF_ERROR(MakeDirs(JoinPath(dir, kBflLoraSubdir)));
    RETURN_IF_ERROR(
        SaveLoraBfl(JoinPath(JoinPath(dir, kBflLoraSubdir), "lora_bfl.safetensors"), params, job.lora, meta));
  }
  return absl::OkStatus();
}

std::map<std::string, at::Tensor> CloneToCpuFloat(const std::map<std::string, at::Tensor>& tensors) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : tensors) out[name] = t.detach().to(at::kCPU, at::kFloat).clone();
  return out;
}

}  // namespace baton
