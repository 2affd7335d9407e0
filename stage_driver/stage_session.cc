#include "stage_driver/stage_session.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <algorithm>

#include "core/lora/lora.h"
#include "core/tensor/shape.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/util/seed.h"
#include "core/util/status.h"

namespace baton {
namespace {

// A file's adapters as one LoRA spec can hold them: every module padded with zeros to the largest rank (B·A is
// unchanged: the extra rows of A meet zero columns of B), its own alpha/r folded into B (the spec's scale is 1).
std::map<std::string, at::Tensor> PaddedParameters(const std::map<std::string, LoraWeights>& weights, int64_t rank) {
  std::map<std::string, LoraWeights> padded;
  for (const auto& [module, w] : weights) {
    const int64_t r = w.A.size(0);
    LoraWeights p = w;
    if (r < rank) {
      p.A = at::cat({w.A.to(at::kFloat), at::zeros({rank - r, w.A.size(1)}, at::kFloat)}, 0);
      p.B = at::cat({w.B.to(at::kFloat), at::zeros({w.B.size(0), rank - r}, at::kFloat)}, 1);
    }
    p.A = p.A.to(at::kFloat).contiguous();
    p.B = p.B.to(at::kFloat).contiguous();
    padded[module] = p;
  }
  return LoraWeightsToParameters(padded, 1.0);
}

}  // namespace

absl::Status StageSession::MakeSpec(const StageSessionOptions& session) {
  spec_.name = "sample";
  spec_.model = session.model;
  spec_.model_config = session.model_config;
  spec_.dtype = session.dtype;
  spec_.quantize = session.quantize;
  spec_.threads = session.threads;
  spec_.micro_batches = session.micro_batches;
  spec_.id = absl::StrFormat("%016x", HashName(absl::StrCat("sample|", session.model, "|", session.model_config, "|",
                                                            session.lora, "|", session.dtype, "|", session.quantize)));
  if (session.lora.empty()) {  // the base model: a zero adapter (B = 0 at init) on attention
    ASSIGN_OR_RETURN(spec_.lora.targets, ResolveLoraTargets("attention"));
    spec_.lora.rank = 1;
    spec_.lora.alpha = 1;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(auto weights, LoadLoraFile(session.lora));
  if (weights.empty()) return absl::InvalidArgumentError(absl::StrCat(session.lora, ": no LoRA adapters in the file"));
  int64_t rank = 0;
  for (const auto& [module, w] : weights) {
    rank = std::max(rank, w.A.size(0));
    spec_.lora.targets.push_back(module);  // exact module names: only the file's modules get an adapter
  }
  spec_.lora.rank = rank;
  spec_.lora.alpha = static_cast<double>(rank);
  file_params_ = PaddedParameters(weights, rank);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StageSession>> StageSession::Start(const StageSessionOptions& session,
                                                                  const StageDriverOptions& options) {
  std::unique_ptr<StageSession> s(new StageSession());
  s->options_ = options;
  RETURN_IF_ERROR(s->MakeSpec(session));
  ASSIGN_OR_RETURN(s->dtype_, ParseDtype(session.dtype));
  ASSIGN_OR_RETURN(s->model_, OpenModel(session.model, session.model_config));
  ASSIGN_OR_RETURN(s->shell_, s->model_->BuildShell(s->dtype_, at::kCPU));
  ASSIGN_OR_RETURN(PartitionOptions popts,
                   StagePartitionOptions(s->spec_, session.tokens, /*samples_per_micro_batch=*/1, options.stages,
                                         s->dtype_, /*remote_workers=*/!options.workers.empty()));
  popts.schedule = ScheduleKind::kGPipe;  // forward-only passes, no optimizer state on the stages
  popts.recompute = RecomputePolicy::kAuto;
  ASSIGN_OR_RETURN(auto plan, PlanStages(*s->model_, std::move(popts), options.stages, 1, options.quiet));

  FleetSettings settings;
  settings.loss_scale = 1.0f / static_cast<float>(session.micro_batches);
  settings.dropout_seed = DropoutBaseSeed(0);
  settings.stall_timeout = options.stall_timeout;
  s->pipeline_ = std::make_unique<StagePipeline>(s->spec_, s->options_, std::move(plan), std::move(settings),
                                                 [] { return false; });
  RETURN_IF_ERROR(s->pipeline_->Start());
  ASSIGN_OR_RETURN(s->master_, s->pipeline_->Adapters());
  for (const auto& [name, t] : s->file_params_) {
    auto it = s->master_.find(name);
    if (it == s->master_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(session.lora, ": ", name, " has no module in this model (a LoRA for another model?)"));
    }
    if (!it->second.sizes().equals(t.sizes())) {
      return absl::InvalidArgumentError(absl::StrCat(session.lora, ": ", name, " is ", ShapeString(t.sizes()),
                                                     ", the model's adapter ", ShapeString(it->second.sizes())));
    }
    it->second = t;
  }
  s->denoiser_ = std::make_unique<StageDenoiser>(*s->model_, *s->shell_, s->dtype_, session.micro_batches,
                                                 *s->pipeline_, s->master_);
  return s;
}

absl::Status StageSession::Stop() {
  if (stopped_ || !pipeline_) return absl::OkStatus();
  stopped_ = true;
  return pipeline_->Stop();
}

StageSession::~StageSession() { (void)Stop(); }

}  // namespace baton
