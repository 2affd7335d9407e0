#include "stage_worker/local_optimizer.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <tuple>
#include <vector>

#include "core/device/bulk_copy.h"
#include "core/device/readback.h"
#include "core/tensor/torch_call.h"
#include "core/train/grad_norm.h"
#include "core/util/clock.h"
#include "core/util/status.h"
#include "wire/optimizer_settings.h"

namespace baton {

absl::Status LocalOptimizer::Hold(int64_t step, bool add, const Tensors& grads) {
  Abandon();  // a sum begun over what was held is no longer this step's
  if (add && held_step_ != step) {
    return absl::FailedPreconditionError(
        absl::StrCat("no gradients of step ", step + 1, " are held to add to (held: step ", held_step_ + 1, ")"));
  }
  at::NoGradGuard no_grad;
  if (!add) {
    // The adapters' own .grad tensors (fp32), taken over: the runner drops its references next, so no copy is made.
    held_.clear();
    for (const auto& [name, g] : grads) held_[name] = g.detach().to(at::kFloat);
    held_step_ = step;
    return absl::OkStatus();
  }
  for (const auto& [name, g] : grads) {
    auto it = held_.find(name);
    if (it == held_.end()) return absl::InternalError(absl::StrCat("no held gradient for ", name));
    it->second.add_(g.detach().to(at::kFloat));
  }
  return absl::OkStatus();
}

LocalOptimizer::~LocalOptimizer() {
  Abandon();
  for (auto& [thread, done] : reductions_) thread.join();
}

void LocalOptimizer::JoinEnded() {
  for (auto it = reductions_.begin(); it != reductions_.end();) {
    if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ++it;
      continue;
    }
    it->first.join();
    it = reductions_.erase(it);
  }
}

void LocalOptimizer::Abandon() {
  if (!flight_) return;
  flight_.reset();
  group_.reset();
}

absl::Status LocalOptimizer::JoinGroup(const PeerGroupSpec& spec, const v1::OptimizerSettings& settings) {
  Abandon();
  group_.reset();
  const std::vector<std::string>& types = OptimizerTypes();
  if (!settings.type().empty() && std::find(types.begin(), types.end(), settings.type()) == types.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown optimizer type \"", settings.type(), "\""));
  }
  const std::string bytes = settings.SerializeAsString();
  if (optimizer_ && bytes != settings_bytes_) {  // the state carries over to an optimizer of the new settings
    loaded_ = State();
    optimizer_.reset();
  }
  config_ = OptimizerConfigOf(settings);
  settings_bytes_ = bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<PeerGroup> group, PeerGroup::Join(spec));
  group_ = std::move(group);
  return absl::OkStatus();
}

at::Tensor LocalOptimizer::FlattenOnDevice() const {
  std::vector<at::Tensor> parts;
  for (const auto& [name, g] : held_) parts.push_back(g.flatten());
  return at::cat(parts);
}

absl::Status LocalOptimizer::StartReduce(int64_t step) {
  Abandon();
  if (!group_) return absl::FailedPreconditionError("no peer group to sum over");
  RETURN_IF_ERROR(CheckHeld(step));
  if (group_->size() == 1) return absl::OkStatus();  // nothing to sum: Reduce takes the held sum as it is
  auto promise = std::make_shared<std::promise<std::pair<absl::Status, double>>>();
  Flight flight{step, group_, std::make_shared<at::Tensor>(), promise->get_future().share()};
  // Not waited for: a reduction given up may wait out a silent peer; the thread then ends on its own, releasing the
  // group, and is joined by the next StartReduce or the destructor. The copy to the host (Gloo sums host memory) is
  // made there too, off the compute thread.
  JoinEnded();
  at::Tensor flat;
  RETURN_IF_ERROR(TorchCall("flattening the held gradients", [&] { flat = FlattenOnDevice(); }));
  std::thread reduce([group = flight.group, host = flight.flat, on_device = std::move(flat), promise]() mutable {
    const auto t0 = std::chrono::steady_clock::now();
    // A copy that throws (device memory, a sticky CUDA error) is this reduction's failure, not the process's.
    absl::Status status =
        TorchCall("copying the gradient sum to the host", [&] { *host = on_device.to(at::kCPU).contiguous(); });
    if (status.ok()) status = group->AllreduceSum(*host);
    on_device = at::Tensor();  // the device buffer released before the outcome is seen
    group.reset();
    promise->set_value({status, SecondsSince(t0)});
  });
  reductions_.emplace_back(std::move(reduce), flight.done);
  flight_ = std::move(flight);
  return absl::OkStatus();
}

absl::Status LocalOptimizer::CheckHeld(int64_t step) const {
  if (held_step_ == step && !held_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("no gradients of step ", step + 1, " are held (held: step ", held_step_ + 1, ")"));
}

void LocalOptimizer::DropSums() {
  Abandon();
  held_.clear();
  reduced_.clear();
  held_step_ = reduced_step_ = -1;
}

absl::StatusOr<v1::ReduceResponse> LocalOptimizer::Reduce(int64_t step) {
  RETURN_IF_ERROR(CheckHeld(step));
  v1::ReduceResponse response;
  if (group_ && group_->size() == 1 && !flight_) {  // one replica: nothing to sum, nothing leaves the device
    reduced_ = held_;
    return Reduced(step, {}, 0, false, response);
  }
  at::Tensor flat;
  double seconds = 0;
  absl::Status summed = absl::OkStatus();
  const bool begun = flight_ && flight_->step == step && flight_->group == group_;
  if (begun) {  // as soon as the sum was held
    std::tie(summed, seconds) = flight_->done.get();
    flat = *flight_->flat;
    flight_.reset();
  } else {
    Abandon();
    if (!group_) return absl::AbortedError("no peer group: the last one was given up; form a new one");
    const auto t0 = std::chrono::steady_clock::now();
    flat = FlattenOnDevice().to(at::kCPU).contiguous();
    summed = group_->AllreduceSum(flat);
    seconds = SecondsSince(t0);
  }
  if (!summed.ok()) {
    group_.reset();  // spent
    return summed;
  }
  // Back to the device in one copy (the sum is on the host for Gloo), cut into the adapters' views there.
  const at::Tensor on_device = held_.empty() ? flat : flat.to(held_.begin()->second.device());
  reduced_.clear();
  int64_t offset = 0;
  for (const auto& [name, g] : held_) {
    reduced_[name] = on_device.narrow(0, offset, g.numel()).view(g.sizes());
    offset += g.numel();
  }
  return Reduced(step, flat, seconds, begun, response);
}

absl::StatusOr<v1::ReduceResponse> LocalOptimizer::Reduced(int64_t step, const at::Tensor& flat, double seconds,
                                                           bool begun, v1::ReduceResponse& response) {
  // The squared norms as every trainer measures a gradient (grad_norm.h), where the sum lives: the step's one readback.
  std::vector<at::Tensor> list;
  for (const auto& [name, g] : reduced_) list.push_back(g);
  const at::Tensor host = ReadBack(SquaredNorms(list));
  const double* values = host.data_ptr<double>();
  for (size_t k = 0; k < reduced_.size(); ++k) response.add_squared_norms(values[k]);
  reduced_step_ = step;
  response.set_seconds(seconds);
  response.set_bytes(flat.defined() ? static_cast<uint64_t>(flat.nbytes()) : 0);
  response.set_begun_when_held(begun);
  return response;
}

absl::StatusOr<v1::UpdateResponse> LocalOptimizer::Update(const v1::UpdateRequest& req, Tensors params) {
  if (reduced_step_ != req.step()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no reduced gradients of step ", req.step() + 1, " (reduced: step ", reduced_step_ + 1, ")"));
  }
  if (!config_) return absl::FailedPreconditionError("no optimizer settings: JoinGroup comes first");
  if (!optimizer_) {  // the first update (of the run, after a Load or new settings); its state moves beside the
                      // adapters as each step first takes it
    auto optimizer = std::make_unique<Optimizer>(*config_);
    if (!loaded_.empty()) RETURN_IF_ERROR(optimizer->LoadStateDict(loaded_));
    optimizer_ = std::move(optimizer);
    loaded_.clear();
  }
  Tensors grads = reduced_;
  // As every trainer clips (grad_norm.h): only when the norm exceeded the limit, by the coordinator's double factor.
  // (An estimate scales copies: the update after it takes the sums again.)
  if (req.clip()) {
    std::vector<at::Tensor> list;
    for (auto& [name, g] : grads) list.push_back(req.estimate() ? (g = g.clone()) : g);
    ScaleGradients(list, req.clip_scale());
  }
  if (req.estimate()) return Estimate(req, params, grads);
  if (config_->type == "prodigy") {
    RETURN_IF_ERROR(optimizer_->StepProdigy(params, grads, req.lr(),
                                            ProdigyOutcome{ProdigyScalarsOf(req.prodigy()), req.prodigy_apply()}));
  } else {
    RETURN_IF_ERROR(optimizer_->Step(params, grads, req.lr()));
  }
  DropSums();
  v1::UpdateResponse response;
  response.set_optimizer_steps(optimizer_->steps());
  return response;
}

absl::StatusOr<v1::UpdateResponse> LocalOptimizer::Estimate(const v1::UpdateRequest& req, const Tensors& params,
                                                            const Tensors& grads) const {
  if (config_->type != "prodigy") {
    return absl::InvalidArgumentError(absl::StrCat("an estimate is Prodigy's, not ", config_->type, "'s"));
  }
  // One readback: the terms of every adapter of this stage, in name order.
  const at::Tensor terms = ReadBack(optimizer_->ProdigyEstimate(params, grads, req.lr()).to(at::kFloat));
  v1::UpdateResponse response;
  response.mutable_prodigy_terms()->Add(terms.data_ptr<float>(), terms.data_ptr<float>() + terms.numel());
  *response.mutable_prodigy() = ProdigyScalarsProto(optimizer_->prodigy());
  response.set_optimizer_steps(optimizer_->steps());
  return response;
}

int64_t LocalOptimizer::Steps() const {
  if (!has_state_) return -1;
  if (optimizer_) return optimizer_->steps();
  auto it = loaded_.find(kOptimizerStepKey);
  return it == loaded_.end() ? 0 : it->second.item<int64_t>();
}

LocalOptimizer::Tensors LocalOptimizer::State() const {
  if (!optimizer_) return loaded_.empty() ? Tensors{{kOptimizerStepKey, at::scalar_tensor(0, at::kLong)}} : loaded_;
  return DownloadAll(optimizer_->StateDict());  // a few copies, one wait
}

LocalOptimizer::Tensors LocalOptimizer::StateView() const {
  if (!optimizer_) return State();
  return optimizer_->StateDict();
}

absl::Status LocalOptimizer::Load(const Tensors& state) {
  // Checked by building an optimizer of the last JoinGroup's settings from it; before any (a resume loads the state
  // first) the first Update checks it (request_checks.h checked every tensor's name, dtype and shape).
  if (config_) RETURN_IF_ERROR(Optimizer(*config_).LoadStateDict(state));
  if (!state.count(kOptimizerStepKey)) return absl::InvalidArgumentError("optimizer state lacks __step__");
  DropSums();
  optimizer_.reset();
  loaded_.clear();
  for (const auto& [name, t] : state) loaded_[name] = t.to(at::kCPU).clone();
  has_state_ = true;
  return absl::OkStatus();
}

void LocalOptimizer::Reset() {
  DropSums();
  group_.reset();
  optimizer_.reset();
  config_.reset();
  loaded_.clear();
  has_state_ = false;
}

}  // namespace baton
