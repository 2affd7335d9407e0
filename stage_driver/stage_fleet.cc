#include "stage_driver/stage_fleet.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/synchronization/mutex.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "core/model/stage_io.h"
#include "core/util/status.h"

namespace baton {

absl::Status ParallelFor(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { results[i] = fn(i); });
  for (auto& t : threads) t.join();
  for (const auto& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string NewRunId() {
  std::random_device entropy;
  const uint64_t id = (static_cast<uint64_t>(entropy()) << 32) ^ entropy() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return absl::StrFormat("%016x", id);
}

uint64_t RunStartGeneration() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

void RopeMirror::Add(const std::string& key) {
  keys_.insert(key);
  order_.push_back(key);
  while (order_.size() > kRopeCacheEntries) {
    keys_.erase(order_.front());
    order_.pop_front();
  }
}

StageFleet::StageFleet(FleetSettings settings, int first_worker, std::string outage_prefix)
    : settings_(std::move(settings)) {
  outages_.Configure(first_worker, std::move(outage_prefix), settings_.stall_timeout, settings_.on_outage);
}

std::string StageFleet::name(int stage) const { return clients_[stage]->name(); }

void StageFleet::Connect(std::vector<std::unique_ptr<StageClient>> clients) {
  clients_ = std::move(clients);
  for (auto& client : clients_) client->set_traffic(traffic_);
  params_.assign(clients_.size(), {});
  rope_.assign(clients_.size(), RopeMirror());
}

void StageFleet::Configured(std::vector<std::vector<std::string>> params) {
  params_ = std::move(params);
  rope_.assign(clients_.size(), RopeMirror());
}

TrafficBytes StageFleet::Traffic() const {
  TrafficBytes total;
  total += *traffic_;
  return total;
}

double StageFleet::OldestPushSeconds() const {
  double oldest = 0;
  for (const auto& client : clients_) oldest = std::max(oldest, client->OldestPushSeconds());
  return oldest;
}

void StageFleet::CancelAll() {
  for (auto& client : clients_) client->Cancel();
}

std::vector<absl::Status> StageFleet::CallEach(const std::string& doing,
                                               const std::function<absl::Status(StageClient&, int)>& call) {
  const double first = outages_.FirstAfterSeconds();
  std::vector<bool> said(clients_.size(), false);  // written by this thread only (the waiting reports)
  std::vector<absl::Status> statuses = calls_.Run(
      size(), [&](int s) { return call(*clients_[s], s); },
      [&](int s, double seconds) {
        if (seconds < first) return;
        outages_.Silent(s, clients_[s]->name(), seconds, doing);
        said[s] = true;
      });
  for (int s = 0; s < size(); ++s) {
    const absl::Status& status = statuses[s];
    // Back when it answered; a call that failed for want of the stage leaves the outage to the recovery.
    if (said[s] && !absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status) && !absl::IsCancelled(status)) {
      outages_.Answered(s);
    }
  }
  return statuses;
}

void StageFleet::ReportSilence(const std::string& what) {
  const double first = outages_.FirstAfterSeconds();
  for (int i = 0; i < size(); ++i) {
    const double silent = clients_[i]->SilentSeconds();
    if (silent >= first) {
      const v1::StageHeartbeat beat = clients_[i]->LastHeartbeat();
      outages_.Silent(i, clients_[i]->name(), silent,
                      absl::StrFormat("%s waits for it; last heartbeat: %s; it counts as stalled at %.0f s", what,
                                      beat.activity().empty() ? "none yet" : beat.activity(),
                                      absl::ToDoubleSeconds(settings_.stall_timeout)));
    } else if (silent > 0 && silent < first && outages_.Open(i)) {
      outages_.Answered(i);  // its stream talks again
    }
  }
}

std::optional<StallVerdict> StageFleet::FindStall(const std::vector<std::atomic<bool>>& fed) const {
  const double limit = absl::ToDoubleSeconds(settings_.stall_timeout);
  const int p = size();
  // A stage that says nothing (stopped, hung, cut off) is the one stalled, not the neighbours waiting for it.
  for (int i = 0; i < p; ++i) {
    const double silent = clients_[i]->SilentSeconds();
    if (silent > limit) {
      const v1::StageHeartbeat beat = clients_[i]->LastHeartbeat();
      return StallVerdict{
          i, absl::StrFormat("%s stalled: no progress heartbeat for %.0f s (last: %s)", clients_[i]->name(), silent,
                             beat.activity().empty() ? "none yet" : beat.activity())};
    }
  }
  // A push in flight that long: the link stalled (both ends still answer).
  for (int i = 0; i < p; ++i) {
    const v1::StageHeartbeat beat = clients_[i]->LastHeartbeat();
    for (const auto& [seconds, peer] :
         {std::pair{beat.next_push_seconds(), (i + 1) % p}, std::pair{beat.prev_push_seconds(), (i + p - 1) % p}}) {
      if (seconds > limit) {
        return StallVerdict{-1, absl::StrFormat("link %s → %s stalled: a push has been in flight for %.0f s",
                                                clients_[i]->name(), clients_[peer]->name(), seconds)};
      }
    }
    const double push = clients_[i]->OldestPushSeconds();
    if (push > limit) {
      return StallVerdict{-1, absl::StrFormat("link %s → %s stalled: a push has been in flight for %.0f s",
                                              clients_[i]->sender(), clients_[i]->name(), push)};
    }
  }
  // A stage still waiting for the driver's data after it was sent all of it: the data is gone (pushed early, then
  // emptied from its inbox by a recovery), and nothing else will come. Redone with its data, not after the 300 s wait.
  for (int i = 0; i < p; ++i) {
    const v1::StageHeartbeat beat = clients_[i]->LastHeartbeat();
    if (fed[i] && beat.waiting_on() == -1 && beat.activity_seconds() > limit) {
      return StallVerdict{
          -1, absl::StrFormat("%s has been %s for %.0f s, though the %s sent it everything: "
                              "the data was lost",
                              clients_[i]->name(), beat.activity(), beat.activity_seconds(), clients_[i]->sender())};
    }
  }
  return std::nullopt;
}

v1::EnvelopeHeader StageFleet::Header(int64_t step, int micro_batch, v1::EnvelopeHeader::Kind kind,
                                      uint64_t pass) const {
  v1::EnvelopeHeader h;
  h.set_pass(pass);
  AddressTo(h, settings_.job_id);
  h.set_step(step);
  h.set_micro_batch(micro_batch);
  h.set_kind(kind);
  h.set_generation(generation_);
  return h;
}

absl::Status StageFleet::PushTablesAndAdapters(int i, int64_t step, uint64_t pass,
                                               const std::vector<ShellOutputs>& shell,
                                               const std::map<std::string, at::Tensor>& master, bool adapters) {
  StageClient& client = *clients_[i];
  // RoPE tables before the weights: a stage looks a table up only after it has its step's weights.
  for (size_t mb = 0; mb < shell.size(); ++mb) {
    if (!rope_[i].Has(shell[mb].tables_key)) {
      RETURN_IF_ERROR(
          client.Push(Header(step, static_cast<int>(mb), v1::EnvelopeHeader::ROPE, pass), TablesOnWire(shell[mb])));
      rope_[i].Add(shell[mb].tables_key);
    }
  }
  if (!adapters) return absl::OkStatus();
  TensorMap weights;
  for (const auto& name : params_[i]) weights[name] = master.at(name);
  return client.Push(Header(step, 0, v1::EnvelopeHeader::LORA_WEIGHTS, pass), weights);
}

absl::Status StageFleet::PushStageData(int i, int64_t step, uint64_t pass, const std::vector<ShellOutputs>& shell,
                                       const std::vector<MicroBatch>* targets) {
  StageClient& client = *clients_[i];
  for (size_t k = 0; k < shell.size(); ++k) {
    const int mb = static_cast<int>(k);
    RETURN_IF_ERROR(client.Push(Header(step, mb, v1::EnvelopeHeader::CONSTANTS, pass), ConstantsOnWire(shell[k])));
    if (i == 0) RETURN_IF_ERROR(client.Push(Header(step, mb, v1::EnvelopeHeader::INPUTS, pass), shell[k].inputs));
    if (targets != nullptr && i == size() - 1) {
      const MicroBatch& batch = (*targets)[k];
      TensorMap target = {{"target", batch.target}};
      if (batch.loss_mask.defined()) target["loss_mask"] = batch.loss_mask;
      if (batch.loss_weighting.defined()) target["loss_weighting"] = batch.loss_weighting;
      RETURN_IF_ERROR(client.Push(Header(step, mb, v1::EnvelopeHeader::TARGET, pass), target));
    }
  }
  return absl::OkStatus();
}

absl::Status StageFleet::PushData(int64_t step, const StepInputs& inputs) {
  return ParallelFor(size(), [&](int i) { return PushStageData(i, step, 0, inputs.shell, &inputs.micro_batches); });
}

v1::StepPlan StageFleet::PlanHead(int64_t step, uint64_t pass, int micro_batches) const {
  v1::StepPlan plan;
  plan.set_job_id(settings_.job_id);  // no config_hash: the job id names the configuration (stage.proto's StepPlan)
  plan.set_step(step);
  plan.set_pass(pass);
  plan.set_micro_batches(micro_batches);
  return plan;
}

v1::StepPlan StageFleet::Plan(int i, int64_t step, const StepSlice& slice) const {
  v1::StepPlan plan = PlanHead(step, 0, slice.schedule.micro_batches);
  plan.set_loss_scale(settings_.loss_scale);
  plan.set_dropout_seed(settings_.dropout_seed);
  plan.set_first_micro_batch(slice.first_micro_batch);
  plan.set_gradients(slice.gradients);
  plan.set_own_adapters(settings_.own_adapters);
  plan.set_reduce_when_held(slice.reduce_when_held);
  for (const Action& a : slice.schedule.per_stage[i]) {
    v1::Action* action = plan.add_actions();
    action->set_type(a.type == Action::kForward ? v1::Action::FORWARD : v1::Action::BACKWARD);
    action->set_micro_batch(a.micro_batch);
    action->set_chunk(a.chunk);
  }
  return plan;
}

absl::StatusOr<StepOutputs> StageFleet::RunStep(int64_t step, const StepSlice& slice, const StepInputs& inputs,
                                                const std::map<std::string, at::Tensor>& master, bool feed_data) {
  StepOutputs out;
  RETURN_IF_ERROR(RunOnStages(
      absl::StrCat("step ", step + 1),
      [&](int i) {
        RETURN_IF_ERROR(PushTablesAndAdapters(i, step, 0, inputs.shell, master, !settings_.own_adapters));
        return feed_data ? PushStageData(i, step, 0, inputs.shell, &inputs.micro_batches) : absl::OkStatus();
      },
      [&](int i) { return Plan(i, step, slice); }, &out.grads, &out.summaries));
  return out;
}

absl::StatusOr<std::vector<at::Tensor>> StageFleet::RunForwardPass(int64_t step, uint64_t pass,
                                                                   const std::vector<ShellOutputs>& shell,
                                                                   const std::map<std::string, at::Tensor>& master) {
  const int m = static_cast<int>(shell.size());
  std::vector<TensorMap> streamed;
  std::vector<v1::StepSummary> summaries;
  const std::string what = absl::StrCat("pass ", pass, " (after step ", step, ")");
  RETURN_IF_ERROR(RunOnStages(
      what,
      [&](int i) {
        RETURN_IF_ERROR(PushTablesAndAdapters(i, step, pass, shell, master, /*adapters=*/true));
        return PushStageData(i, step, pass, shell, /*targets=*/nullptr);
      },
      [&](int) { return PassPlan(step, pass, m); }, &streamed, &summaries));
  std::vector<at::Tensor> outputs;
  const TensorMap& last = streamed.back();  // the last virtual stage is on the last worker
  for (int mb = 0; mb < m; ++mb) {
    auto it = last.find(absl::StrCat("output/", mb));
    if (it == last.end()) {
      return absl::DataLossError(
          absl::StrCat(what, ": ", clients_.back()->name(), " sent no output for micro-batch ", mb));
    }
    outputs.push_back(it->second);
  }
  return outputs;
}

v1::StepPlan StageFleet::PassPlan(int64_t step, uint64_t pass, int micro_batches) const {
  v1::StepPlan plan = PlanHead(step, pass, micro_batches);
  // Chunk by chunk, every micro-batch through each: the stages pipeline the micro-batches, and no worker waits on an
  // action it has yet to run.
  for (int c = 0; c < settings_.chunks; ++c) {
    for (int mb = 0; mb < micro_batches; ++mb) {
      v1::Action* action = plan.add_actions();
      action->set_type(v1::Action::FORWARD);
      action->set_micro_batch(mb);
      action->set_chunk(c);
    }
  }
  return plan;
}

absl::Status StageFleet::RunOnStages(const std::string& what, const std::function<absl::Status(int)>& feed,
                                     const std::function<v1::StepPlan(int)>& plan_for, std::vector<TensorMap>* streamed,
                                     std::vector<v1::StepSummary>* summaries) {
  const int p = size();
  streamed->assign(p, TensorMap());
  summaries->assign(p, v1::StepSummary());
  // Feed (weights first, then each micro-batch's data) and run, all stages at once.
  std::vector<absl::Status> feed_status(p), run_status(p);
  std::vector<std::atomic<bool>> fed(p);  // [stage] its feed succeeded
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  auto fail_all = [&] {
    if (!failed.exchange(true)) {
      for (auto& c : clients_) c->Cancel();
    }
  };
  absl::Mutex done_mu;
  size_t done = 0;  // calls returned, under done_mu
  auto finished = [&] {
    absl::MutexLock lock(&done_mu);
    ++done;
  };
  for (auto& c : clients_) c->Rearm();  // a failed step before this one cancelled them
  for (int i = 0; i < p; ++i) {
    auto feed_one = [&, i] {
      feed_status[i] = feed(i);
      if (!feed_status[i].ok()) fail_all();
      fed[i] = feed_status[i].ok();
      return feed_status[i].ok();
    };
    auto run_one = [&, i] {
      auto summary = clients_[i]->RunStep(plan_for(i), &(*streamed)[i]);
      if (summary.ok()) {
        (*summaries)[i] = std::move(*summary);
      } else {
        run_status[i] = summary.status();
        fail_all();
      }
    };
    if (settings_
            .own_adapters) {  // no LORA_WEIGHTS to await: a stage computes at once, so its RoPE tables must be in first
      threads.emplace_back([&, feed_one, run_one] {
        if (feed_one()) run_one();
        finished();
      });
      continue;
    }
    threads.emplace_back([&, feed_one] {
      feed_one();
      finished();
    });
    threads.emplace_back([&, run_one] {
      run_one();
      finished();
    });
  }
  // Watch for a stall until every call has returned; a stall fails the step, blaming the stage or link.
  absl::Status stall;
  last_stall_ = {};
  for (;;) {
    {
      absl::MutexLock lock(&done_mu);
      auto all_done = [&] { return done == threads.size(); };
      if (done_mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Milliseconds(200))) break;
    }
    if (!failed && stall.ok()) {
      ReportSilence(what);
      if (std::optional<StallVerdict> verdict = FindStall(fed)) {
        last_stall_ = *verdict;
        stall = absl::DeadlineExceededError(verdict->message);
        fail_all();
      }
    }
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < p; ++i) {
    if (run_status[i].ok() && feed_status[i].ok()) outages_.Answered(i);  // it answered to the end
  }
  if (!stall.ok()) return absl::Status(stall.code(), absl::StrCat(what, " failed: ", stall.message()));
  if (!failed) return absl::OkStatus();
  // Report the root cause: a stage's own failure beats the cancellations it caused elsewhere.
  absl::Status first;
  for (int i = 0; i < p; ++i) {
    for (const absl::Status& s : {run_status[i], feed_status[i]}) {
      if (s.ok()) continue;
      if (first.ok() || (first.code() == absl::StatusCode::kCancelled && s.code() != absl::StatusCode::kCancelled)) {
        first = s;
      }
    }
  }
  return absl::Status(first.code(), absl::StrCat(what, " failed: ", first.message()));
}

}  // namespace baton
