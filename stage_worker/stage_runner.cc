#include "stage_worker/stage_runner.h"

#include <ATen/Parallel.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>

#include "core/lora/lora.h"
#include "core/quant/quantize_module.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "core/util/threads.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Fresh leaves for a stage input: detached copies on the stage's device that record their gradient.
Flux2Activations MakeLeaves(const Flux2Activations& in, bool requires_grad) {
  Flux2Activations out = in;
  for (at::Tensor* t : {&out.img, &out.txt, &out.joint}) {
    if (t->defined()) *t = t->detach().requires_grad_(requires_grad);
  }
  return out;
}

}  // namespace

StageRunner::StageRunner(StageRunnerOptions options) : options_(std::move(options)) {}
StageRunner::~StageRunner() = default;

std::string StageRunner::name() const {
  return absl::StrCat("stage ", config_.stage_index(), " (", options_.address, ")");
}

absl::StatusOr<v1::ConfigureResponse> StageRunner::Configure(const v1::ConfigureRequest& req) {
  std::lock_guard<std::mutex> lock(run_mu_);
  configured_ = false;
  next_.reset();
  prev_.reset();
  inbox_.Clear();
  {
    std::lock_guard<std::mutex> rope_lock(rope_mu_);
    rope_.clear();
    rope_order_.clear();
  }
  if (req.job_id().empty()) return absl::InvalidArgumentError("Configure: job_id is empty");
  if (req.num_stages() < 1 || req.stage_index() < 0 || req.stage_index() >= req.num_stages()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Configure: stage_index ", req.stage_index(), " of ", req.num_stages(), " stages"));
  }
  if (req.threads() > 0) SetComputeThreads(req.threads());
  ASSIGN_OR_RETURN(dtype_, ParseDtype(req.dtype().empty() ? "fp32" : req.dtype()));
  ASSIGN_OR_RETURN(device_, ParseDevice(req.device().empty() ? options_.device : req.device()));
  ASSIGN_OR_RETURN(WireDtype wire, ParseWireDtype(req.wire_dtype().empty() ? "none" : req.wire_dtype()));
  transfer_ = std::make_unique<DeviceTransfer>(device_);
  pinned_host_ = transfer_->wants_pinned_host();
  auto checkpoint = Flux2Checkpoint::Open(req.model_path(), req.model_config_path());
  if (!checkpoint.ok()) return Annotate(checkpoint.status(), "Configure: opening the model on this worker");
  checkpoint_ = std::move(*checkpoint);
  const Flux2Config& c = checkpoint_->config();
  if (req.block_begin() < 0 || req.block_begin() >= req.block_end() || req.block_end() > c.num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("Configure: block range [", req.block_begin(), ", ", req.block_end(),
                                                   ") is not inside the model's ", c.num_blocks(), " blocks"));
  }
  LoraSpec spec;
  spec.rank = req.lora().rank();
  spec.alpha = req.lora().alpha();
  spec.targets.assign(req.lora().targets().begin(), req.lora().targets().end());
  spec.dropout = req.lora().dropout();
  spec.seed = req.seed();
  ASSIGN_OR_RETURN(WeightQuant quant, ParseWeightQuant(req.quantize().empty() ? "none" : req.quantize()));
  Flux2StageRange range{req.block_begin(), req.block_end(), req.has_embedders(), req.has_head()};
  ASSIGN_OR_RETURN(stage_, BuildFlux2Stage(*checkpoint_, range, dtype_, device_, &spec, /*train=*/true, quant));
  config_ = req;
  const absl::Duration timeout = options_.wait_timeout;
  if (!req.next_address().empty()) {
    next_ = std::make_unique<PeerSender>(req.next_address(),
                                         absl::StrCat("stage ", req.stage_index() + 1, " (", req.next_address(), ")"),
                                         timeout, wire);
  }
  if (!req.prev_address().empty()) {
    prev_ = std::make_unique<PeerSender>(req.prev_address(),
                                         absl::StrCat("stage ", req.stage_index() - 1, " (", req.prev_address(), ")"),
                                         timeout, wire);
  }
  v1::ConfigureResponse response;
  int64_t numel = 0;
  for (const auto& [pname, p] : LoraParameters(*stage_)) {
    response.add_lora_param_names(pname);
    numel += p.numel();
  }
  response.set_num_lora_params(numel);
  const uint64_t bytes = static_cast<uint64_t>(FrozenBytes(*stage_));  // 8-bit weights are buffers
  response.set_loaded_bytes(bytes);
  configured_ = true;
  LogInfo(name(), ": configured blocks [", req.block_begin(), ", ", req.block_end(), ")",
          req.has_embedders() ? " + embedders" : "", req.has_head() ? " + head" : "", ", ",
          response.lora_param_names_size(), " LoRA tensors, ", bytes >> 20, " MiB of frozen weights (quantize ",
          WeightQuantName(quant), "), recompute ", req.recompute() ? "on" : "off");
  return response;
}

absl::Status StageRunner::Deliver(ReceivedEnvelope envelope) {
  const v1::EnvelopeHeader& h = envelope.header;
  {
    std::lock_guard<std::mutex> rope_lock(rope_mu_);
    bytes_received_ += envelope.bytes;
  }
  if (h.kind() == v1::EnvelopeHeader::ROPE) {
    if (!transfer_) return absl::FailedPreconditionError(absl::StrCat(name(), ": ROPE tables before Configure"));
    std::map<std::string, std::pair<at::Tensor, at::Tensor>> tables;
    for (auto& [tname, t] : envelope.tensors) {
      bool is_cos = absl::StartsWith(tname, "rope_cos/"), is_sin = absl::StartsWith(tname, "rope_sin/");
      if (!is_cos && !is_sin)
        return absl::InvalidArgumentError(absl::StrCat("ROPE envelope: unexpected tensor ", tname));
      if (t.dim() != 2 || t.scalar_type() != at::kFloat) {
        return absl::InvalidArgumentError(absl::StrCat("ROPE envelope: ", tname, " must be a 2-d fp32 table"));
      }
      auto& slot = tables[tname.substr(9)];
      (is_cos ? slot.first : slot.second) = transfer_->Upload(t);
    }
    std::lock_guard<std::mutex> rope_lock(rope_mu_);
    for (auto& [key, pair] : tables) {
      if (!pair.first.defined() || !pair.second.defined()) {
        return absl::InvalidArgumentError(absl::StrCat("ROPE envelope: key ", key, " lacks cos or sin"));
      }
      if (!rope_.count(key)) rope_order_.push_back(key);
      rope_[key] = pair;
      while (rope_order_.size() > options_.rope_cache_entries) {
        rope_.erase(rope_order_.front());
        rope_order_.pop_front();
      }
    }
    return absl::OkStatus();
  }
  inbox_.Put(h.step(), h.micro_batch(), h.kind(), std::move(envelope.tensors));
  return absl::OkStatus();
}

v1::EnvelopeHeader StageRunner::Header(const v1::StepPlan& plan, int32_t mb, v1::EnvelopeHeader::Kind kind) const {
  v1::EnvelopeHeader h;
  h.set_job_id(plan.job_id());
  h.set_step(plan.step());
  h.set_micro_batch(mb);
  h.set_kind(kind);
  h.set_sender(name());
  return h;
}

absl::StatusOr<TensorMap> StageRunner::Await(const v1::StepPlan& plan, int32_t mb, v1::EnvelopeHeader::Kind kind,
                                             const std::function<bool()>& cancelled, v1::StepSummary& summary) {
  std::string from = "the coordinator";
  if (kind == v1::EnvelopeHeader::ACTIVATION && prev_) from = prev_->peer_name();
  if (kind == v1::EnvelopeHeader::GRADIENT && next_) from = next_->peer_name();
  auto t0 = Clock::now();
  auto result = inbox_.Take(plan.step(), mb, kind, options_.wait_timeout, cancelled, from);
  summary.set_idle_seconds(summary.idle_seconds() + Since(t0));
  if (!result.ok()) {
    // A neighbour that failed to deliver explains a timeout better than the timeout itself.
    for (PeerSender* peer : {next_.get(), prev_.get()}) {
      if (peer) {
        absl::Status s = peer->Flush(absl::ZeroDuration());
        if (!s.ok() && s.code() != absl::StatusCode::kDeadlineExceeded) return s;
      }
    }
    return Annotate(result.status(), name());
  }
  return result;
}

// Blocks recomputed under recompute: the planner's choice (0 from the coordinator = all of them).
static int64_t RecomputeBlocks(const v1::ConfigureRequest& c) {
  return c.recompute_blocks() > 0 ? c.recompute_blocks() : Flux2StageImpl::kAllBlocks;
}

Flux2Activations StageRunner::RunBlocks(MicroBatchState& state, const v1::StepPlan& plan, int32_t mb) {
  SetLoraDropoutSeed(*stage_, MicroBatchDropoutSeed(plan.dropout_seed(), plan.step(), mb));
  // With recompute: no graph, but every block's input is kept for the per-block recompute in Backward.
  if (config_.recompute()) {
    return stage_->ForwardCheckpointed(state.input, state.constants, &state.checkpoints, RecomputeBlocks(config_));
  }
  at::AutoGradMode mode(true);
  return stage_->forward(state.input, state.constants);
}

absl::Status StageRunner::Forward(const v1::StepPlan& plan, int32_t mb, const std::function<bool()>& cancelled,
                                  std::map<int32_t, MicroBatchState>& states, v1::StepSummary& summary) {
  const Flux2Config& c = checkpoint_->config();
  MicroBatchState state;
  if (config_.has_embedders()) {
    ASSIGN_OR_RETURN(TensorMap t, Await(plan, mb, v1::EnvelopeHeader::INPUTS, cancelled, summary));
    auto in = InputsFromTensors(t, c, dtype_);
    if (!in.ok()) return Annotate(in.status(), absl::StrCat(name(), " micro-batch ", mb));
    state.input = MakeLeaves(*in, false);
  } else {
    ASSIGN_OR_RETURN(TensorMap t, Await(plan, mb, v1::EnvelopeHeader::ACTIVATION, cancelled, summary));
    auto in = ActivationsFromTensors(t, c, dtype_);
    if (!in.ok()) return Annotate(in.status(), absl::StrCat(name(), " micro-batch ", mb));
    state.input = MakeLeaves(*in, true);
  }
  for (at::Tensor* t : {&state.input.img, &state.input.txt, &state.input.joint}) {
    if (t->defined()) *t = transfer_->Upload(*t).detach().requires_grad_(t->requires_grad());
  }
  ASSIGN_OR_RETURN(TensorMap kt, Await(plan, mb, v1::EnvelopeHeader::CONSTANTS, cancelled, summary));
  auto constants = ConstantsFromTensors(kt, c);
  if (!constants.ok()) return Annotate(constants.status(), absl::StrCat(name(), " micro-batch ", mb));
  state.constants = constants->first;
  for (at::Tensor* t :
       {&state.constants.mod_img, &state.constants.mod_txt, &state.constants.mod_single, &state.constants.mod_out}) {
    *t = transfer_->Upload(*t, dtype_);
  }
  {
    std::lock_guard<std::mutex> rope_lock(rope_mu_);
    auto it = rope_.find(constants->second);
    if (it == rope_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(name(), ": no RoPE table '", constants->second,
                                                        "' (the coordinator must send ROPE before CONSTANTS)"));
    }
    state.constants.rope_cos = it->second.first;
    state.constants.rope_sin = it->second.second;
  }
  if (config_.has_head()) {
    ASSIGN_OR_RETURN(TensorMap t, Await(plan, mb, v1::EnvelopeHeader::TARGET, cancelled, summary));
    if (!t.count("target") || t.at("target").dim() != 3 || t.at("target").size(-1) != c.out_dim()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": TARGET of micro-batch ", mb, " must be [b, Si, ", c.out_dim(), "]"));
    }
    state.target = transfer_->Upload(t.at("target"));
  }
  auto t0 = Clock::now();
  absl::Status run = TorchCall("forward", [&] {
    Flux2Activations out = RunBlocks(state, plan, mb);
    if (config_.has_head()) {
      at::Tensor loss = FlowMatchingLoss(out.output, state.target);
      summary.set_losses(mb, static_cast<float>(loss.item<double>()));
      if (!config_.recompute()) state.loss = loss;
    } else {
      if (!config_.recompute()) state.output = out;
      TensorMap tensors;
      for (auto& [tname, t] : ActivationTensors(out)) tensors[tname] = t.detach();
      next_->Send(Header(plan, mb, v1::EnvelopeHeader::ACTIVATION), std::move(tensors));
    }
  });
  summary.set_forward_seconds(summary.forward_seconds() + Since(t0));
  if (!run.ok()) return Annotate(run, absl::StrCat(name(), " micro-batch ", mb));
  states[mb] = std::move(state);
  return absl::OkStatus();
}

absl::Status StageRunner::Backward(const v1::StepPlan& plan, int32_t mb, const std::function<bool()>& cancelled,
                                   std::map<int32_t, MicroBatchState>& states, v1::StepSummary& summary) {
  auto it = states.find(mb);
  if (it == states.end()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": B", mb, " before F", mb, " in the step plan"));
  }
  MicroBatchState& state = it->second;
  TensorMap grads;
  if (!config_.has_head()) {
    ASSIGN_OR_RETURN(grads, Await(plan, mb, v1::EnvelopeHeader::GRADIENT, cancelled, summary));
  }
  auto t0 = Clock::now();
  absl::Status run = TorchCall("backward", [&] {
    // Where backward starts: the scaled loss on the last stage, else the received output gradients.
    auto seed = [&](const Flux2Activations& out) -> std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> {
      if (config_.has_head()) {
        at::Tensor loss = config_.recompute() ? FlowMatchingLoss(out.output, state.target) : state.loss;
        return {{loss * static_cast<double>(plan.loss_scale())}, {}};
      }
      TensorMap named = ActivationTensors(out);
      std::vector<at::Tensor> outputs, output_grads;
      for (auto& [gname, g] : grads) {
        auto o = named.find(gname);
        TORCH_CHECK(o != named.end() && o->second.is_floating_point(), "GRADIENT names '", gname,
                    "', which this stage does not output");
        TORCH_CHECK(g.sizes() == o->second.sizes(), "GRADIENT '", gname, "' has the wrong shape");
        outputs.push_back(o->second);
        output_grads.push_back(g.to(o->second.device(), o->second.scalar_type()));
      }
      return {outputs, output_grads};
    };
    if (config_.recompute()) {
      // Per-block recompute from the checkpoints Forward kept: one block's graph at a time, never the stage's.
      SetLoraDropoutSeed(*stage_, MicroBatchDropoutSeed(plan.dropout_seed(), plan.step(), mb));
      stage_->BackwardFromCheckpoints(std::move(state.checkpoints), state.constants, seed, RecomputeBlocks(config_));
    } else {
      auto [roots, root_grads] = seed(state.output);
      torch::autograd::backward(roots, root_grads);
    }
  });
  summary.set_backward_seconds(summary.backward_seconds() + Since(t0));
  if (!run.ok()) return Annotate(run, absl::StrCat(name(), " micro-batch ", mb));
  if (prev_) prev_->Send(Header(plan, mb, v1::EnvelopeHeader::GRADIENT), InputGradientTensors(state.input));
  states.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<v1::StepSummary> StageRunner::RunStep(const v1::StepPlan& plan, const std::function<bool()>& cancelled,
                                                     const GradSink& sink) {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (!configured_) return absl::FailedPreconditionError(absl::StrCat(name(), ": RunStep before Configure"));
  if (plan.job_id() != config_.job_id()) {
    return absl::FailedPreconditionError(absl::StrCat(name(), ": step plan for job '", plan.job_id(),
                                                      "' but this worker is configured for '", config_.job_id(), "'"));
  }
  if (plan.micro_batches() < 1) return absl::InvalidArgumentError("step plan: micro_batches must be ≥ 1");
  v1::StepSummary summary;
  summary.set_step(plan.step());
  for (int i = 0; i < plan.micro_batches(); ++i) summary.add_losses(0.0f);

  // The weights for this step come first: a stage never computes with stale adapters.
  ASSIGN_OR_RETURN(TensorMap weights, Await(plan, 0, v1::EnvelopeHeader::LORA_WEIGHTS, cancelled, summary));
  RETURN_IF_ERROR(Annotate(AssignLoraParameters(*stage_, weights), name()));
  ZeroLoraGradients(*stage_);

  std::map<int32_t, MicroBatchState> states;
  for (const v1::Action& action : plan.actions()) {
    if (action.micro_batch() < 0 || action.micro_batch() >= plan.micro_batches()) {
      return absl::InvalidArgumentError(absl::StrCat("step plan: micro-batch ", action.micro_batch(), " out of range"));
    }
    if (action.type() == v1::Action::FORWARD) {
      RETURN_IF_ERROR(Forward(plan, action.micro_batch(), cancelled, states, summary));
    } else if (action.type() == v1::Action::BACKWARD) {
      RETURN_IF_ERROR(Backward(plan, action.micro_batch(), cancelled, states, summary));
    } else {
      return absl::InvalidArgumentError("step plan: action without a type");
    }
  }
  if (!states.empty()) return absl::InvalidArgumentError("step plan: some forwards had no backward");
  for (PeerSender* peer : {next_.get(), prev_.get()}) {
    if (peer) RETURN_IF_ERROR(Annotate(peer->Flush(options_.wait_timeout), name()));
  }
  for (const auto& [pname, g] : LoraGradients(*stage_)) {
    RETURN_IF_ERROR(sink(pname, g.detach().to(at::kCPU, at::kFloat)));
  }
  ZeroLoraGradients(*stage_);
  inbox_.DropBefore(plan.step() + 1);
  uint64_t sent = 0;
  for (PeerSender* peer : {next_.get(), prev_.get()}) sent += peer ? peer->bytes_sent() : 0;
  summary.set_bytes_sent(sent);
  {
    std::lock_guard<std::mutex> rope_lock(rope_mu_);
    summary.set_bytes_received(bytes_received_);
  }
  return summary;
}

absl::StatusOr<TensorMap> StageRunner::CurrentLora() {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (!configured_) return absl::FailedPreconditionError(absl::StrCat(name(), ": not configured"));
  return CloneToCpuFloat(LoraParameters(*stage_));
}

}  // namespace baton
