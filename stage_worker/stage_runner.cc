#include "stage_worker/stage_runner.h"

#include <ATen/Parallel.h>
#include <absl/cleanup/cleanup.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <thread>

#include "core/device/determinism.h"
#include "core/device/device_memory.h"
#include "core/device/pinned_host.h"
#include "core/device/threads.h"
#include "core/lora/lora.h"
#include "core/metrics/process_memory.h"
#include "core/model/block_swap.h"
#include "core/model/quantize_module.h"
#include "core/tensor/torch_call.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "rpc/frozen_key.h"
#include "stage_worker/configure_checks.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Gradients of a stage's input, by the same names: every floating input (integers such as FLUX.2's txt_len get none).
TensorMap InputGradientTensors(const TensorMap& input) {
  TensorMap out;
  for (const auto& [tname, x] : input) {
    if (x.is_floating_point()) out[tname] = x.grad().defined() ? x.grad() : at::zeros_like(x);
  }
  return out;
}

// GRADIENT answers the activation this stage sent: the same names and exactly the same shapes.
absl::Status CheckGradientShapes(const std::map<std::string, std::vector<int64_t>>& sent, const TensorMap& grads) {
  if (grads.size() != sent.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GRADIENT has ", grads.size(), " tensors for the ", sent.size(), " this stage sent"));
  }
  for (const auto& [gname, g] : grads) {
    auto it = sent.find(gname);
    if (it == sent.end()) {
      return absl::InvalidArgumentError(absl::StrCat("GRADIENT names '", gname, "', which this stage does not output"));
    }
    RETURN_IF_ERROR(CheckExactShape(absl::StrCat("GRADIENT '", gname, "'"), it->second, g));
  }
  return absl::OkStatus();
}

// Where a bundle waits in the inbox: training steps under their step (≥ 0), forward-only passes under −pass.
int64_t InboxKey(int64_t step, uint64_t pass) { return pass != 0 ? -static_cast<int64_t>(pass) : step; }

std::string WorkName(const v1::StepPlan& plan) { return baton::WorkName(plan.step(), plan.pass()); }

}  // namespace

StageRunner::StageRunner(StageRunnerOptions options)
    : options_(std::move(options)), address_(options_.address), inbox_(options_.inbox_bytes) {}

void StageRunner::set_address(const std::string& address) {
  absl::MutexLock lock(&address_mu_);
  address_ = address;
}
StageRunner::~StageRunner() { ForgetDevicePeakOwner(reinterpret_cast<uintptr_t>(this)); }

std::string StageRunner::name() const {
  absl::MutexLock lock(&address_mu_);
  return absl::StrCat("stage ", stage_index_.load(), " (", address_, ")");
}

std::map<std::string, at::Tensor> StageRunner::AllLora() {
  std::map<std::string, at::Tensor> all;
  for (auto& chunk : chunks_) all.merge(LoraParameters(chunk->module()));
  return all;
}

bool StageRunner::SameStage(const v1::ConfigureRequest& req) const {
  v1::ConfigureRequest a = config_, b = req;
  for (v1::ConfigureRequest* r : {&a, &b}) {
    r->clear_next_address();
    r->clear_prev_address();
    r->clear_generation();
    r->clear_run_id();
  }
  return a.SerializeAsString() == b.SerializeAsString();
}

std::vector<FrozenTensors> StageRunner::FrozenFor(const std::string& key) const {
  absl::MutexLock lock(&frozen_mu_);
  return !key.empty() && key == frozen_key_ ? frozen_ : std::vector<FrozenTensors>{};
}

absl::StatusOr<v1::ConfigureResponse> StageRunner::Configure(const v1::ConfigureRequest& req,
                                                             const std::vector<FrozenTensors>* shared) {
  // Everything is checked and the model opened first, before the generation moves or any lock is taken: an invalid
  // request leaves the running job and its step as they were.
  absl::StatusOr<PreparedStage> prepared = PrepareConfigure(req, options_.model_root, options_.device);
  if (!prepared.ok()) return prepared.status();
  // Then, before the lock: a step of an older generation still running sees this and stops (RunStep), and envelopes of
  // the aborted step are dropped from now on.
  for (uint64_t g = generation_.load();
       req.generation() > g && !generation_.compare_exchange_weak(g, req.generation());) {
  }
  absl::MutexLock lock(&run_mu_);
  // Within a run the generation only rises; a new run's is taken as it is (its coordinator starts them at the wall
  // clock, above any earlier run's).
  generation_ = req.generation();
  const bool new_run = configured_ && req.run_id() != config_.run_id();
  ApplyDeterminism(prepared->device, !req.allow_nondeterministic());
  {
    absl::MutexLock expected_lock(&expected_mu_);
    expected_.reset();  // pushes wait for the new job
  }
  next_.reset();
  prev_.reset();
  inbox_.Clear();
  {
    absl::MutexLock rope_lock(&rope_mu_);
    rope_.clear();
    rope_order_.clear();
  }
  if (configured_ && SameStage(req)) {  // a recovery (new neighbours), or a new run of the same job
    // A recovery reopens the step window: the run goes on at whatever step it has reached (a data-parallel replica
    // rejoins steps after it was lost); the aborted attempt's envelopes are dropped by their older generation.
    if (new_run) {
      ResetForNewRun();
    } else {
      current_step_ = -1;
    }
    config_ = req;
    stage_index_ = req.stage_index();
    ConnectPeers(prepared->wire);
    PublishExpected(req.micro_batches());
    LogInfo(name(), new_run ? ": configured for a new run " : ": reconfigured for generation ",
            new_run ? req.run_id() : absl::StrCat(req.generation()), " (model kept; next ", req.next_address(),
            ", prev ", req.prev_address(), ")");
    return Response();
  }
  configured_ = false;
  optimizer_.Reset();
  host_copy_.Drop();
  if (req.threads() > 0) SetComputeThreads(req.threads());
  dtype_ = prepared->dtype;
  device_ = prepared->device;
  if (device_.is_cuda()) NoteCudaDeviceInUse(device_.index());  // baton_device_memory_allocated_bytes
  const WireDtype wire = prepared->wire;
  const WeightQuant quant = prepared->quant;
  {
    absl::MutexLock transfer_lock(&transfer_mu_);
    transfer_ = std::make_shared<DeviceTransfer>(device_);
    pinned_host_ = transfer_->wants_pinned_host();
  }
  model_ = std::move(prepared->model);
  ranges_ = prepared->ranges;
  chunks_.clear();
  {
    absl::MutexLock frozen_lock(&frozen_mu_);
    frozen_key_.clear();
    frozen_.clear();
  }
  // A stage that swaps blocks changes its tensors' storage in and out: it shares them with no other pipeline.
  const bool swaps = req.offload_blocks() > 0;
  if ((shared && shared->size() != ranges_.size()) || swaps) shared = nullptr;
  std::vector<FrozenTensors> frozen;
  for (size_t c = 0; c < ranges_.size(); ++c) {
    ASSIGN_OR_RETURN(std::unique_ptr<StageModel> chunk,
                     model_->BuildStage(ranges_[c], dtype_, device_, &prepared->lora, /*train=*/true, quant,
                                        shared ? &(*shared)[c] : nullptr));
    frozen.push_back(FrozenStageTensors(chunk->module()));
    chunks_.push_back(std::move(chunk));
  }
  if (swaps) RETURN_IF_ERROR(SwapBlocks(req));
  {
    absl::MutexLock frozen_lock(&frozen_mu_);
    frozen_key_ = FrozenWeightsKey(req, options_.device);  // empty when it swaps: FrozenFor never matches it
    if (!frozen_key_.empty()) frozen_ = std::move(frozen);
  }
  config_ = req;
  stage_index_ = req.stage_index();
  initial_lora_ = CloneToCpuFloat(AllLora());
  metrics_.Configure(req.job_name(), req.stage_index(), req.replica());
  ConnectPeers(wire);
  v1::ConfigureResponse response = Response();
  const uint64_t bytes = response.loaded_bytes();
  configured_ = true;
  current_step_ = -1;
  PublishExpected(req.micro_batches());
  std::string blocks;
  for (const StageRange& r : ranges_) {
    absl::StrAppend(&blocks, blocks.empty() ? "" : " + ", "[", r.block_begin, ", ", r.block_end, ")",
                    r.has_embedders ? " + embedders" : "", r.has_head ? " + head" : "");
  }
  LogInfo(name(), ": configured ", ranges_.size() > 1 ? absl::StrCat(ranges_.size(), " chunks, blocks ") : "blocks ",
          blocks, ", ", response.lora_param_names_size(), " LoRA tensors, ", bytes >> 20, " MiB of frozen weights",
          shared ? " shared with another pipeline" : "", " (quantize ", WeightQuantName(quant), "), recompute ",
          req.recompute() ? "on" : "off");
  return response;
}

absl::Status StageRunner::AssignAllLora(TensorMap weights) {
  for (auto& chunk : chunks_) {
    std::map<std::string, at::Tensor> mine;
    for (const auto& [pname, p] : LoraParameters(chunk->module())) {
      auto it = weights.find(pname);
      if (it == weights.end()) continue;  // AssignLoraParameters names it as missing
      mine[pname] = it->second;
      weights.erase(it);
    }
    RETURN_IF_ERROR(Annotate(AssignLoraParameters(chunk->module(), mine), name()));
    ZeroLoraGradients(chunk->module());
  }
  if (!weights.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": LoRA weights do not fit the model: ", weights.begin()->first, " (no such adapter here)"));
  }
  return absl::OkStatus();
}

void StageRunner::ResetForNewRun() {
  optimizer_.Reset();
  host_copy_.Drop();
  const absl::Status restored = AssignAllLora(initial_lora_);
  TORCH_CHECK(restored.ok(), "initial adapters do not fit their own stage: ", restored.message());  // a bug
  current_step_ = -1;
  absl::MutexLock rope_lock(&rope_mu_);
  bytes_received_ = 0;
}

absl::StatusOr<ExpectedStageIO> StageRunner::Expected() const {
  std::shared_ptr<const ExpectedStageIO> expected;
  {
    absl::MutexLock lock(&expected_mu_);
    expected = expected_;
  }
  if (!expected) return absl::FailedPreconditionError(absl::StrCat(name(), ": not configured for any job"));
  ExpectedStageIO out = *expected;
  out.current_step = current_step_.load();
  return out;
}

void StageRunner::PublishExpected(int32_t micro_batches) {
  auto e = std::make_shared<ExpectedStageIO>();
  e->job_id = config_.job_id();
  e->config_hash = config_.config_hash();
  e->micro_batches = micro_batches;
  e->num_chunks = static_cast<int32_t>(ranges_.size());
  for (const StageRange& r : ranges_) {
    e->takes_inputs |= r.has_embedders;
    e->takes_target |= r.has_head;
    e->takes_activation |= !r.has_embedders;
    e->takes_gradient |= !r.has_head;
  }
  e->model = model_;
  e->dtype = dtype_;
  for (const auto& [pname, p] : AllLora()) e->lora_shapes[pname] = p.sizes().vec();
  absl::MutexLock lock(&expected_mu_);
  expected_ = std::move(e);
}

absl::Status StageRunner::CheckPushHeader(const v1::EnvelopeHeader& header) const {
  ASSIGN_OR_RETURN(ExpectedStageIO expected, Expected());
  return CheckEnvelopeHeader(expected, header);
}

void StageRunner::ConnectPeers(WireDtype wire) {
  const v1::ConfigureRequest& req = config_;
  const absl::Duration timeout = options_.wait_timeout;
  const int p = req.num_stages(), s = req.stage_index();
  if (!req.next_address().empty()) {
    next_ = std::make_unique<PeerSender>(
        req.next_address(), absl::StrCat("stage ", (s + 1) % p, " (", req.next_address(), ")"), timeout, wire,
        metrics_.Link(absl::StrCat("stage", (s + 1) % p)), options_.send_queue_bytes);
  }
  if (!req.prev_address().empty()) {
    prev_ = std::make_unique<PeerSender>(
        req.prev_address(), absl::StrCat("stage ", (s + p - 1) % p, " (", req.prev_address(), ")"), timeout, wire,
        metrics_.Link(absl::StrCat("stage", (s + p - 1) % p)), options_.send_queue_bytes);
  }
}

v1::ConfigureResponse StageRunner::Response() {
  v1::ConfigureResponse response;
  int64_t numel = 0;
  for (const auto& [pname, p] : AllLora()) {
    response.add_lora_param_names(pname);
    numel += p.numel();
  }
  response.set_num_lora_params(numel);
  uint64_t bytes = 0;  // 8-bit weights are buffers, FrozenBytes counts them
  for (auto& chunk : chunks_) bytes += static_cast<uint64_t>(FrozenBytes(chunk->module()));
  response.set_loaded_bytes(bytes);
  return response;
}

std::shared_ptr<DeviceTransfer> StageRunner::Transfer() {
  absl::MutexLock lock(&transfer_mu_);
  return transfer_;
}

absl::Status StageRunner::Deliver(ReceivedEnvelope envelope) {
  const v1::EnvelopeHeader& h = envelope.header;
  // Leftovers of a step a recovery aborted (a neighbour's late push, the coordinator's early data): dropped.
  if (h.generation() < generation_.load()) return absl::OkStatus();
  {
    // Nothing unchecked gets in: another job's data, stale or far-future steps, wrong shapes, NaN targets.
    ASSIGN_OR_RETURN(ExpectedStageIO expected, Expected());
    absl::Status accepted = CheckEnvelope(expected, envelope);
    if (!accepted.ok()) return Annotate(accepted, name());
  }
  {
    absl::MutexLock rope_lock(&rope_mu_);
    bytes_received_ += envelope.bytes;
  }
  if (h.kind() == v1::EnvelopeHeader::ROPE) {
    // A snapshot: a Configure racing this push may replace transfer_; the old one stays valid while we use it.
    const std::shared_ptr<DeviceTransfer> transfer = Transfer();
    if (!transfer) return absl::FailedPreconditionError(absl::StrCat(name(), ": ROPE tables before Configure"));
    // CheckEnvelope let in only "<table>/<key>" names of one key that the family accepts as its tables.
    std::map<std::string, TensorMap> tables;
    for (auto& [tname, t] : envelope.tensors) {
      const size_t slash = tname.rfind('/');
      tables[tname.substr(slash + 1)][tname.substr(0, slash)] = transfer->Upload(t);
    }
    absl::MutexLock rope_lock(&rope_mu_);
    for (auto& [key, named] : tables) {
      if (!rope_.count(key)) rope_order_.push_back(key);
      rope_[key] = std::move(named);
      while (rope_order_.size() > options_.rope_cache_entries) {
        rope_.erase(rope_order_.front());
        rope_order_.pop_front();
      }
    }
    return absl::OkStatus();
  }
  return Annotate(
      inbox_.Put(InboxKey(h.step(), h.pass()), h.micro_batch(), h.kind(), std::move(envelope.tensors), h.chunk()),
      name());
}

v1::EnvelopeHeader StageRunner::Header(const v1::StepPlan& plan, int32_t mb, v1::EnvelopeHeader::Kind kind,
                                       int32_t chunk) const {
  v1::EnvelopeHeader h;
  h.set_job_id(plan.job_id());
  h.set_config_hash(config_.config_hash());  // the configured one: a plan may leave it out
  h.set_step(plan.step());
  h.set_micro_batch(mb);
  h.set_kind(kind);
  h.set_sender(name());
  h.set_chunk(chunk);
  h.set_generation(config_.generation());
  h.set_pass(plan.pass());
  return h;
}

absl::StatusOr<TensorMap> StageRunner::Await(const v1::StepPlan& plan, int32_t mb, v1::EnvelopeHeader::Kind kind,
                                             const std::function<bool()>& cancelled, v1::StepSummary& summary,
                                             int32_t chunk) {
  std::string from = "the coordinator";
  if (kind == v1::EnvelopeHeader::ACTIVATION && prev_) from = prev_->peer_name();
  if (kind == v1::EnvelopeHeader::GRADIENT && next_) from = next_->peer_name();
  const int p = config_.num_stages(), s = config_.stage_index();
  int waiting_on = kWaitingOnCoordinator;
  if (kind == v1::EnvelopeHeader::ACTIVATION && prev_) waiting_on = (s + p - 1) % p;
  if (kind == v1::EnvelopeHeader::GRADIENT && next_) waiting_on = (s + 1) % p;
  progress_.Set(absl::StrCat("waiting for ", v1::EnvelopeHeader::Kind_Name(kind), " of ", WorkName(plan),
                             " micro-batch ", mb, " from ", from),
                waiting_on);
  auto t0 = Clock::now();
  // A push of ours that failed (a cut link, a neighbour gone) ends the wait at once: what we wait for may never come
  // because of it, and the error names the link (issue 25: a cut link used to wait out the whole wait_timeout).
  PeerSender* const next = next_.get();
  PeerSender* const prev = prev_.get();
  auto stop = [&] {
    if (cancelled && cancelled()) return true;
    for (PeerSender* peer : {next, prev}) {
      if (peer && peer->failed()) return true;
    }
    return false;
  };
  auto result = inbox_.Take(InboxKey(plan.step(), plan.pass()), mb, kind, options_.wait_timeout, stop, from, chunk);
  progress_.Set("computing");
  const double idle = Since(t0);
  summary.set_idle_seconds(summary.idle_seconds() + idle);
  metrics_.AddIdleSeconds(idle);
  if (!result.ok()) {
    // A neighbour that failed to deliver explains a timeout better than the timeout itself.
    for (PeerSender* peer : {next_.get(), prev_.get()}) {
      if (peer && peer->failed()) return Annotate(peer->Flush(absl::ZeroDuration()), name());
    }
    return Annotate(result.status(), name());
  }
  return result;
}

// Blocks recomputed under recompute: the planner's choice (0 from the coordinator = all of them).
static int64_t RecomputeBlocks(const v1::ConfigureRequest& c) {
  return c.recompute_blocks() > 0 ? c.recompute_blocks() : StageModel::kAllBlocks;
}

absl::Status StageRunner::SwapBlocks(const v1::ConfigureRequest& req) {
  const int64_t n = req.offload_blocks();
  if (chunks_.size() != 1) return absl::InvalidArgumentError("offload_blocks: not with interleaved chunks");
  if (!req.recompute() || (RecomputeBlocks(req) != StageModel::kAllBlocks && RecomputeBlocks(req) < n)) {
    return absl::InvalidArgumentError(absl::StrCat("offload_blocks ", n, ": the swapped blocks must be recomputed (",
                                                   "recompute on, recompute_blocks 0 or >= ", n, ")"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const BlockSwap> swap, SwapFirstBlocks(*chunks_.front(), n, Transfer()));
  LogInfo(name(), ": swaps its first ", n, " blocks from host memory (", swap->host_bytes() >> 20, " MiB)");
  return absl::OkStatus();
}

absl::Status StageRunner::EnsureWeights(const v1::StepPlan& plan, const std::function<bool()>& cancelled,
                                        StepState& step, v1::StepSummary& summary) {
  if (step.weights_loaded || plan.own_adapters()) return absl::OkStatus();
  // The weights for this step come before any computation: a stage never computes with stale adapters.
  ASSIGN_OR_RETURN(TensorMap weights, Await(plan, 0, v1::EnvelopeHeader::LORA_WEIGHTS, cancelled, summary));
  // Every adapter tensor starts its upload now (side stream, from pinned memory); the copies into the parameters
  // below then run device to device on the compute stream, with no host synchronisation per tensor.
  const std::shared_ptr<DeviceTransfer> transfer = Transfer();
  for (auto& [pname, w] : weights) w = transfer->Upload(w);
  RETURN_IF_ERROR(AssignAllLora(std::move(weights)));
  step.weights_loaded = true;
  return absl::OkStatus();
}

absl::StatusOr<TensorMap> StageRunner::AwaitInput(const v1::StepPlan& plan, int32_t chunk, int32_t mb,
                                                  const std::function<bool()>& cancelled, v1::StepSummary& summary) {
  const bool first = ranges_[chunk].has_embedders;  // the model's inputs come from the coordinator
  ASSIGN_OR_RETURN(TensorMap t, Await(plan, mb, first ? v1::EnvelopeHeader::INPUTS : v1::EnvelopeHeader::ACTIVATION,
                                      cancelled, summary, first ? 0 : chunk));
  absl::Status valid = model_->CheckWire(first ? WireKind::kInputs : WireKind::kActivation, t, dtype_);
  if (!valid.ok()) return Annotate(valid, absl::StrCat(name(), " micro-batch ", mb));
  // Fresh leaves on the stage's device: model inputs in the compute dtype, activations recording their gradient.
  // Integer tensors (FLUX.2's txt_len) stay on the host.
  TensorMap leaves;
  for (auto& [tname, x] : t) {
    if (!x.is_floating_point()) {
      leaves[tname] = x;
      continue;
    }
    // Uploaded as sent and cast on the device: a host-side cast would be one more pass over pageable memory.
    leaves[tname] = Transfer()
                        ->Upload(x, first ? std::optional<at::ScalarType>(dtype_) : std::nullopt)
                        .detach()
                        .requires_grad_(!first);
  }
  return leaves;
}

absl::StatusOr<TensorMap> StageRunner::Constants(const v1::StepPlan& plan, int32_t mb,
                                                 const std::function<bool()>& cancelled, StepState& step,
                                                 v1::StepSummary& summary) {
  auto cached = step.constants.find(mb);
  if (cached != step.constants.end()) return cached->second;
  ASSIGN_OR_RETURN(TensorMap kt, Await(plan, mb, v1::EnvelopeHeader::CONSTANTS, cancelled, summary));
  TensorMap out;
  std::string key;
  for (const auto& [kname, t] : kt) {
    if (absl::StartsWith(kname, kTablesKeyPrefix)) {
      key = kname.substr(strlen(kTablesKeyPrefix));
    } else {
      // Floating constants in the compute dtype (as the shell made them), on the device. Integer ones (Wan's
      // [frames, height, width] grid) stay on the host: the model reads them as sizes, and a device copy would
      // cost a device → host synchronisation on every head forward and recompute.
      out[kname] = t.is_floating_point() ? Transfer()->Upload(t, dtype_) : t;
    }
  }
  {
    absl::MutexLock rope_lock(&rope_mu_);
    auto it = rope_.find(key);
    if (it == rope_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(name(), ": no RoPE table '", key, "' (the coordinator must send ROPE before LORA_WEIGHTS)"));
    }
    for (const auto& [tname, table] : it->second) out[tname] = table;
  }
  step.constants[mb] = out;
  return out;
}

TensorMap StageRunner::RunBlocks(int32_t chunk, MicroBatchState& state, const v1::StepPlan& plan, int32_t mb) {
  StageModel& stage = *chunks_[chunk];
  if (plan.pass() != 0) {  // forward only: no graph (dropout is off: the pass runs in eval mode)
    at::NoGradGuard no_grad;
    return stage.Forward(state.input, state.constants);
  }
  SetLoraDropoutSeed(stage.module(),
                     MicroBatchDropoutSeed(plan.dropout_seed(), plan.step(), plan.first_micro_batch() + mb));
  // With recompute: no graph, but every block's input is kept for the per-block recompute in Backward.
  if (config_.recompute()) {
    return stage.ForwardCheckpointed(state.input, state.constants, &state.checkpoints, RecomputeBlocks(config_));
  }
  at::AutoGradMode mode(true);
  return stage.Forward(state.input, state.constants);
}

absl::Status StageRunner::Forward(const v1::StepPlan& plan, int32_t chunk, int32_t mb,
                                  const std::function<bool()>& cancelled, StepState& step, v1::StepSummary& summary) {
  const StageRange& range = ranges_[chunk];
  MicroBatchState state;
  ASSIGN_OR_RETURN(state.input, AwaitInput(plan, chunk, mb, cancelled, summary));
  RETURN_IF_ERROR(EnsureWeights(plan, cancelled, step, summary));
  ASSIGN_OR_RETURN(state.constants, Constants(plan, mb, cancelled, step, summary));
  const bool pass = plan.pass() != 0;
  if (range.has_head && !pass) {
    ASSIGN_OR_RETURN(TensorMap t, Await(plan, mb, v1::EnvelopeHeader::TARGET, cancelled, summary));
    absl::Status valid = model_->CheckWire(WireKind::kTarget, t, dtype_);
    if (!valid.ok()) return Annotate(valid, absl::StrCat(name(), ": TARGET of micro-batch ", mb));
    state.target = Transfer()->Upload(t.at("target"));
    if (t.count("loss_mask")) state.loss_mask = Transfer()->Upload(t.at("loss_mask"));
    if (t.count("loss_weighting")) state.loss_weighting = Transfer()->Upload(t.at("loss_weighting"));
  }
  std::optional<ComputeTurns::Turn> turn;  // the worker's compute, taken in turns with its other pipelines
  if (options_.compute_turns) turn.emplace(options_.compute_turns->Take(ComputeTurns::Kind::kForward));
  auto t0 = Clock::now();
  step.forward_spans.Begin();
  progress_.Set(absl::StrCat("forward of ", WorkName(plan), " micro-batch ", mb));
  absl::Status shape = absl::OkStatus();
  absl::Status run = TorchCall("forward", [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) {
    TensorMap out = RunBlocks(chunk, state, plan, mb);
    if (range.has_head && pass) {
      step.outputs[mb] = out.at("output");
    } else if (range.has_head) {
      // The target must match the prediction exactly: the loss would broadcast a wrong one silently.
      shape = CheckExactShape(absl::StrCat("TARGET of step ", plan.step(), " micro-batch ", mb),
                              out.at("output").sizes(), state.target);
      if (!shape.ok()) return;
      at::Tensor loss = FlowMatchingLoss(out.at("output"), state.target, state.loss_mask, state.loss_weighting);
      step.losses[mb] = loss.detach().to(at::kFloat);  // read once per step (FillLosses): no sync here
      if (!config_.recompute()) state.loss = loss;
    } else {
      if (!config_.recompute()) state.output = out;
      for (const auto& [tname, t] : out) {
        if (t.is_floating_point()) state.sent[tname] = t.sizes().vec();
      }
      // Queued: the peer sender's thread ships it while we compute the next action.
      SendAsync(*next_, Header(plan, mb, v1::EnvelopeHeader::ACTIVATION, NextChunk(chunk)), out);
    }
  });
  step.forward_spans.End();
  turn.reset();
  const double seconds = Since(t0);
  summary.set_forward_seconds(summary.forward_seconds() + seconds);
  metrics_.AddForwardSeconds(seconds);
  if (run.ok()) run = shape;
  if (!run.ok()) return Annotate(run, absl::StrCat(name(), " micro-batch ", mb));
  if (pass) return absl::OkStatus();  // nothing to keep: no backward follows
  step.live[{chunk, mb}] = std::move(state);
  metrics_.SetInFlight(step.live.size());
  return absl::OkStatus();
}

absl::Status StageRunner::Backward(const v1::StepPlan& plan, int32_t chunk, int32_t mb,
                                   const std::function<bool()>& cancelled, StepState& step, v1::StepSummary& summary) {
  auto it = step.live.find({chunk, mb});
  if (it == step.live.end()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": B", mb, " before F", mb,
                                                   chunks_.size() > 1 ? absl::StrCat(" of chunk ", chunk) : "",
                                                   " in the step plan"));
  }
  const StageRange& range = ranges_[chunk];
  MicroBatchState& state = it->second;
  TensorMap grads;
  if (!range.has_head) {
    ASSIGN_OR_RETURN(grads, Await(plan, mb, v1::EnvelopeHeader::GRADIENT, cancelled, summary, chunk));
    RETURN_IF_ERROR(Annotate(CheckGradientShapes(state.sent, grads), absl::StrCat(name(), " micro-batch ", mb)));
    // Through the upload path (side stream, pinned memory), in the compute dtype the outputs have.
    for (auto& [gname, g] : grads) g = Transfer()->Upload(g, dtype_);
  }
  std::optional<ComputeTurns::Turn> turn;  // the worker's compute, taken in turns with its other pipelines
  if (options_.compute_turns) turn.emplace(options_.compute_turns->Take(ComputeTurns::Kind::kBackward));
  auto t0 = Clock::now();
  step.backward_spans.Begin();
  progress_.Set(absl::StrCat("backward of step ", plan.step(), " micro-batch ", mb));
  const bool recompute = config_.recompute();
  absl::Status run = TorchCall("backward", [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) {
    // Where backward starts: the scaled loss on the last stage, else the received output gradients.
    auto seed = [&](const TensorMap& named) -> std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> {
      if (range.has_head) {
        at::Tensor loss =
            recompute ? FlowMatchingLoss(named.at("output"), state.target, state.loss_mask, state.loss_weighting)
                      : state.loss;
        return {{loss * static_cast<double>(plan.loss_scale())}, {}};
      }
      std::vector<at::Tensor> outputs, output_grads;
      for (auto& [gname, g] : grads) {
        auto o = named.find(gname);
        TORCH_CHECK(o != named.end() && o->second.is_floating_point(), "GRADIENT names '", gname,
                    "', which this stage does not output");
        TORCH_CHECK(g.sizes() == o->second.sizes(), "GRADIENT '", gname, "' has the wrong shape");
        outputs.push_back(o->second);
        output_grads.push_back(g.scalar_type() == o->second.scalar_type() ? g : g.to(o->second.scalar_type()));
      }
      return {outputs, output_grads};
    };
    if (recompute) {
      // Per-block recompute from the checkpoints Forward kept: one block's graph at a time, never the stage's.
      SetLoraDropoutSeed(chunks_[chunk]->module(),
                         MicroBatchDropoutSeed(plan.dropout_seed(), plan.step(), plan.first_micro_batch() + mb));
      chunks_[chunk]->BackwardFromCheckpoints(std::move(state.checkpoints), state.constants, seed,
                                              RecomputeBlocks(config_));
    } else {
      auto [roots, root_grads] = seed(state.output);
      torch::autograd::backward(roots, root_grads);
    }
  });
  step.backward_spans.End();
  turn.reset();
  const double seconds = Since(t0);
  summary.set_backward_seconds(summary.backward_seconds() + seconds);
  metrics_.AddBackwardSeconds(seconds);
  if (!run.ok()) return Annotate(run, absl::StrCat(name(), " micro-batch ", mb));
  if (!range.has_embedders) {
    SendAsync(*prev_, Header(plan, mb, v1::EnvelopeHeader::GRADIENT, PrevChunk(chunk)),
              InputGradientTensors(state.input));
  }
  step.live.erase(it);
  metrics_.SetInFlight(step.live.size());
  return absl::OkStatus();
}

void StageRunner::SendAsync(PeerSender& peer, v1::EnvelopeHeader header, const TensorMap& tensors) {
  TensorMap host;
  std::vector<std::function<void()>> waits;
  for (const auto& [tname, t] : tensors) {
    DeviceTransfer::PendingDownload d = Transfer()->DownloadAsync(t.detach());
    host[tname] = std::move(d.host);
    if (d.wait) waits.push_back(std::move(d.wait));
  }
  std::function<void()> ready;
  if (!waits.empty()) {
    ready = [waits = std::move(waits)] {
      for (const auto& wait : waits) wait();
    };
  }
  peer.Send(std::move(header), std::move(host), std::move(ready));
}

v1::StageHeartbeat StageRunner::Progress(const PeerSender* next, const PeerSender* prev) const {
  v1::StageHeartbeat p = progress_.Snapshot();
  p.set_next_push_seconds(next ? next->busy_seconds() : 0);
  p.set_prev_push_seconds(prev ? prev->busy_seconds() : 0);
  return p;
}

absl::StatusOr<v1::StepSummary> StageRunner::RunStep(const v1::StepPlan& plan, const std::function<bool()>& cancelled,
                                                     const GradSink& sink, const Heartbeat& heartbeat) {
  absl::MutexLock lock(&run_mu_);
  if (!configured_) return absl::FailedPreconditionError(absl::StrCat(name(), ": RunStep before Configure"));
  progress_.Set("starting the step");
  // The heartbeat thread lives inside run_mu_, so the peers it reads cannot be replaced under it.
  const PeerSender* const next = next_.get();
  const PeerSender* const prev = prev_.get();
  absl::Mutex beat_mu;
  bool done = false;  // under beat_mu
  std::thread beat;
  if (heartbeat) {
    beat = std::thread([&] {
      absl::MutexLock beat_lock(&beat_mu);
      while (!beat_mu.AwaitWithTimeout(absl::Condition(&done), options_.heartbeat_interval)) {
        heartbeat(Progress(next, prev));
      }
    });
  }
  // Joined on every way out: a joinable std::thread destroyed by an exception would end the process.
  const absl::Cleanup stop_beat = [&] {
    if (!beat.joinable()) return;
    {
      absl::MutexLock beat_lock(&beat_mu);
      done = true;
    }
    beat.join();
  };
  // A Configure of a newer generation (a recovery) aborts this step without waiting for the coordinator's cancel.
  const uint64_t generation = config_.generation();
  auto aborted = [&] { return generation_.load() != generation || (cancelled && cancelled()); };
  // The GPU check's traced steps ($BATON_KINETO_TRACE): this thread's operators and the device's kernels.
  std::optional<KinetoTrace> trace;
  if (plan.pass() == 0 && trace_window_.Covers(plan.step())) trace.emplace(device_);
  // Most of the step's libtorch calls sit inside TorchCall; an allocation outside one (an upload, a gradient flatten
  // running out of device memory) fails the step with its status (RESOURCE_EXHAUSTED for memory), not the process.
  absl::StatusOr<v1::StepSummary> summary = absl::InternalError("unset");
  const absl::Status threw = TorchCall(
      "the step", [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) { summary = RunActions(plan, aborted, sink); });
  if (!threw.ok()) summary = Annotate(threw, name());
  if (trace) {
    const absl::Status saved = trace->Save(trace_window_.Path(stage_index_, plan.step()));
    if (!saved.ok()) LogWarning(name(), ": the Kineto trace was not saved: ", saved.message());
  }
  return summary;
}

absl::StatusOr<v1::StepSummary> StageRunner::RunActions(const v1::StepPlan& plan,
                                                        const std::function<bool()>& cancelled, const GradSink& sink) {
  {
    ASSIGN_OR_RETURN(ExpectedStageIO expected, Expected());
    RETURN_IF_ERROR(Annotate(CheckStepPlan(expected, plan), name()));
  }
  if (plan.pass() != 0) return RunPass(plan, cancelled, sink);
  // The window moves: pushes for this step and the next two are accepted from now on, older ones dropped.
  current_step_ = plan.step();
  inbox_.DropOutside(plan.step(), plan.step() + ExpectedStageIO::kStepWindow);
  v1::StepSummary summary;
  summary.set_step(plan.step());
  for (int i = 0; i < plan.micro_batches(); ++i) summary.add_losses(0.0f);

  StepState step(device_);
  metrics_.SetInFlight(0);  // a failed step may have left some
  // A step's gradients start from zero: an aborted attempt's partial sums are dropped (with the stage's own adapters no
  // LORA_WEIGHTS push zeroes them, as it does with the coordinator's).
  for (auto& chunk : chunks_) ZeroLoraGradients(chunk->module());
  for (const v1::Action& action : plan.actions()) {
    if (action.type() == v1::Action::FORWARD) {
      RETURN_IF_ERROR(Forward(plan, action.chunk(), action.micro_batch(), cancelled, step, summary));
    } else {  // CheckStepPlan admits only FORWARD and BACKWARD
      RETURN_IF_ERROR(Backward(plan, action.chunk(), action.micro_batch(), cancelled, step, summary));
    }
  }
  if (!step.live.empty()) return absl::InvalidArgumentError("step plan: some forwards had no backward");
  RETURN_IF_ERROR(EnsureWeights(plan, cancelled, step, summary));  // a plan without actions still takes them
  RETURN_IF_ERROR(FlushPeers(plan, cancelled));
  std::map<std::string, at::Tensor> grads;
  for (auto& chunk : chunks_) grads.merge(LoraGradients(chunk->module()));
  if (plan.gradients() != v1::StepPlan::STREAM) {  // a stage-local optimizer's: kept here for Reduce
    RETURN_IF_ERROR(Annotate(optimizer_.Hold(plan.step(), plan.gradients() == v1::StepPlan::HOLD_ADD, grads), name()));
    grads.clear();
    if (plan.reduce_when_held() && plan.gradients() == v1::StepPlan::HOLD_NEW) {
      // While the stages upstream run their last backwards; Reduce does it now if this could not start.
      absl::Status started = optimizer_.StartReduce(plan.step());
      if (!started.ok())
        LogWarning(name(), ": the sum of step ", plan.step() + 1, " starts later: ", started.message());
    }
  }
  progress_.Set("sending the gradients to the coordinator");
  // Every download starts before the first is awaited: one wait for the lot instead of one sync per tensor.
  const std::shared_ptr<DeviceTransfer> transfer = Transfer();
  std::vector<std::pair<std::string, DeviceTransfer::PendingDownload>> pending;
  for (const auto& [pname, g] : grads) pending.emplace_back(pname, transfer->DownloadAsync(g.detach().to(at::kFloat)));
  for (auto& [pname, d] : pending) {
    if (d.wait) d.wait();
    RETURN_IF_ERROR(sink(pname, d.host));
  }
  for (auto& chunk : chunks_) ZeroLoraGradients(chunk->module());
  inbox_.DropBefore(plan.step() + 1);
  FillLosses(step, summary);
  FillByteCounts(summary);
  FillDeviceFigures(step, summary);
  TrimPinnedHost();
  return summary;
}

absl::Status StageRunner::FlushPeers(const v1::StepPlan& plan, const std::function<bool()>& cancelled) {
  progress_.Set(absl::StrCat("sending the last outputs of ", WorkName(plan)));
  for (PeerSender* peer : {next_.get(), prev_.get()}) {
    // In slices: an aborted step must not wait out a push to a stalled peer.
    const auto deadline = Clock::now() + absl::ToChronoNanoseconds(options_.wait_timeout);
    absl::Status flushed = absl::DeadlineExceededError("");
    while (peer && !flushed.ok() && absl::IsDeadlineExceeded(flushed) && Clock::now() < deadline) {
      if (cancelled()) return absl::CancelledError(absl::StrCat(name(), ": ", WorkName(plan), " cancelled"));
      flushed = peer->Flush(absl::Milliseconds(100));
    }
    if (peer) RETURN_IF_ERROR(Annotate(flushed, name()));
  }
  return absl::OkStatus();
}

void StageRunner::FillDeviceFigures(StepState& step, v1::StepSummary& summary) {
  summary.set_device_forward_seconds(step.forward_spans.TakeSeconds());
  summary.set_device_backward_seconds(step.backward_spans.TakeSeconds());
  if (!device_.is_cuda()) {
    const int64_t resident = ResidentMemoryBytes();
    summary.set_memory_bytes(resident > 0 ? static_cast<uint64_t>(resident) : 0);
    return;
  }
  const DevicePeakBytes peak = TakeDevicePeakBytes(device_.index(), reinterpret_cast<uintptr_t>(this));
  summary.set_memory_bytes(peak.allocated > 0 ? static_cast<uint64_t>(peak.allocated) : 0);
  summary.set_memory_reserved_bytes(peak.reserved > 0 ? static_cast<uint64_t>(peak.reserved) : 0);
}

void StageRunner::FillLosses(StepState& step, v1::StepSummary& summary) {
  if (step.losses.empty()) return;
  std::vector<at::Tensor> losses;
  for (const auto& [mb, loss] : step.losses) losses.push_back(loss);
  const at::Tensor host = Transfer()->Download(at::stack(losses));  // [micro-batches] fp32
  int i = 0;
  for (const auto& [mb, loss] : step.losses) summary.set_losses(mb, host[i++].item<float>());
}

void StageRunner::TrimPinnedHost() {
  if (!device_.is_cuda()) return;
  const uint64_t budget = options_.inbox_bytes + 2 * options_.send_queue_bytes;
  if (TrimPinnedHostCache(static_cast<int64_t>(budget))) {
    LogInfo(name(), ": returned cached pinned host memory (over ", budget >> 20, " MiB)");
  }
}

void StageRunner::FillByteCounts(v1::StepSummary& summary) {
  uint64_t sent = 0;
  for (PeerSender* peer : {next_.get(), prev_.get()}) sent += peer ? peer->bytes_sent() : 0;
  summary.set_bytes_sent(sent);
  absl::MutexLock rope_lock(&rope_mu_);
  summary.set_bytes_received(bytes_received_);
}

absl::StatusOr<v1::StepSummary> StageRunner::RunPass(const v1::StepPlan& plan, const std::function<bool()>& cancelled,
                                                     const GradSink& sink) {
  v1::StepSummary summary;
  summary.set_step(plan.step());
  StepState step(device_);
  // Eval mode (no LoRA dropout) for the pass only; the training step window and the adapters' gradients are untouched.
  std::vector<bool> was_training;
  for (auto& chunk : chunks_) {
    was_training.push_back(chunk->module().is_training());
    chunk->module().eval();
  }
  // A stage-local optimizer's adapters are the run's state: the pass's weights (the EMA's, say) serve the pass only.
  TensorMap own;
  if (optimizer_.Steps() >= 0) {
    for (const auto& [pname, p] : AllLora()) own[pname] = p.detach().clone();
  }
  absl::Status run = absl::OkStatus();
  for (const v1::Action& action : plan.actions()) {
    run = Forward(plan, action.chunk(), action.micro_batch(), cancelled, step, summary);
    if (!run.ok()) break;
  }
  if (run.ok()) run = EnsureWeights(plan, cancelled, step, summary);
  if (run.ok()) run = FlushPeers(plan, cancelled);
  for (size_t c = 0; c < chunks_.size(); ++c) chunks_[c]->module().train(was_training[c]);
  if (!own.empty()) {
    const absl::Status restored = AssignAllLora(std::move(own));
    if (run.ok()) run = restored;
  }
  inbox_.DropStep(InboxKey(plan.step(), plan.pass()));
  RETURN_IF_ERROR(run);
  progress_.Set("sending the pass's outputs to the coordinator");
  for (const auto& [mb, out] : step.outputs) {
    RETURN_IF_ERROR(sink(absl::StrCat("output/", mb), Transfer()->Download(out.detach().to(at::kFloat))));
  }
  FillByteCounts(summary);
  TrimPinnedHost();
  return summary;
}

absl::StatusOr<TensorMap> StageRunner::CurrentLora(const std::string& job_id, const std::string& config_hash,
                                                   bool optimizer_state) {
  absl::MutexLock lock(&run_mu_);
  RETURN_IF_ERROR(CheckExchangeJob(job_id, config_hash, "GetLora"));
  TensorMap lora = CloneToCpuFloat(AllLora());
  if (optimizer_state) lora.merge(optimizer_.State());
  return lora;
}

}  // namespace baton
