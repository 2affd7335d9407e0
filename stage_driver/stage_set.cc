#include "stage_driver/stage_set.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cstdio>

#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "stage_driver/configure_request.h"
#include "stage_driver/local_tls.h"
#include "stage_driver/shared_workers.h"
#include "stage_driver/stage_metrics.h"

namespace baton {

StageSet::StageSet(PipelineSpec pipeline, const StageDriverOptions& options, std::vector<std::vector<StageSpec>> plan,
                   StageFleet* fleet, std::function<bool()> stop, int replica)
    : pipeline_(std::move(pipeline)),
      options_(options),
      plan_(std::move(plan)),
      fleet_(fleet),
      stop_(std::move(stop)),
      replica_(replica) {}

StageSet::~StageSet() { ReleaseOnSharedWorkers(); }

// Workers: embedded local processes (started here, into local_), or the ones given. Returns their addresses.
absl::StatusOr<std::vector<std::string>> StageSet::StartWorkers() {
  const StageDriverOptions& options = options_;
  std::unique_ptr<LocalWorkers>* local = &local_;
  const bool publish_targets = !options.metrics_address.empty() && options.replicas == 1;  // else ReplicaSet does
  if (!options.workers.empty()) {
    RETURN_IF_ERROR(RequireRemoteWorkerSecurity());
    if (publish_targets) {  // remote workers' metrics ports are their operators' to list
      RETURN_IF_ERROR(
          PublishMetricsTargets(options.output_dir, options.process, options.metrics_address, {}, !options.quiet));
    }
    const auto first = options.workers.begin() + options.FirstWorker(replica_);
    return std::vector<std::string>(first, first + options.StagesOf(replica_));
  }
  LocalWorkerOptions lopts;
  if (!options.stage_worker_binary.empty()) lopts.binary = options.stage_worker_binary;
  lopts.threads = pipeline_.threads;
  int wait_s = options.worker_wait_timeout_s > 0 ? options.worker_wait_timeout_s
                                                 : static_cast<int>(absl::ToInt64Seconds(options.rpc_timeout));
  lopts.extra_args = {absl::StrCat("--wait_timeout_s=", wait_s)};
  ASSIGN_OR_RETURN(std::vector<std::string> tls_args, LocalWorkerSecurityArgs());  // stage_driver/local_tls.h
  lopts.extra_args.insert(lopts.extra_args.end(), tls_args.begin(), tls_args.end());
  // Workers read models only inside their --model_root: ours may read exactly the pipeline's model files.
  // (A model that does not resolve gets no root here; the worker's Configure then names what is missing.)
  if (auto root = CommonRoot({pipeline_.model, pipeline_.model_config}); root.ok()) {
    lopts.extra_args.push_back(absl::StrCat("--model_root=", *root));
  }
  const int stages = options.StagesOf(replica_);
  for (int i = 0; i < stages && !options.metrics_listen.empty(); ++i) {
    ASSIGN_OR_RETURN(std::string listen, StageMetricsListen(options.metrics_listen, options.FirstWorker(replica_) + i));
    lopts.worker_args.push_back({absl::StrCat("--metrics=", listen)});
  }
  if (options.shared_workers) {  // another member may have started them: they print nothing here
    if (options.replicas > 1) return absl::InvalidArgumentError("shared stage workers serve one replica");
    return options.shared_workers->Start(stages, lopts);
  }
  ASSIGN_OR_RETURN(*local, LocalWorkers::Start(stages, lopts));
  std::vector<std::string> addresses = (*local)->addresses();
  if (!options.quiet) {
    const std::string whose = options.replicas > 1 ? absl::StrCat(" for replica ", replica_) : "";
    std::printf("started %d local stage workers%s: %s\n", stages, whose.c_str(),
                absl::StrJoin(addresses, ", ").c_str());
  }
  if (publish_targets) {
    RETURN_IF_ERROR(PublishMetricsTargets(options.output_dir, options.process, options.metrics_address,
                                          (*local)->metrics_addresses(), !options.quiet));
  }
  return addresses;
}

absl::Status StageSet::Start() {
  ASSIGN_OR_RETURN(addresses_, StartWorkers());
  if (stop_()) return absl::CancelledError("stopped before the first step: nothing to checkpoint");
  RETURN_IF_ERROR(Connect());
  return Configure();
}

// Fresh clients (fresh channels: no reconnect backoff left over from a lost worker) for every stage, each waited
// for until its health service says SERVING.
absl::Status StageSet::Connect() {
  const int p = static_cast<int>(addresses_.size());
  std::vector<std::unique_ptr<StageClient>> clients;
  for (int i = 0; i < p; ++i) {
    clients.push_back(std::make_unique<StageClient>(i, addresses_[i], options_.rpc_timeout));
    clients.back()->set_sender(options_.process);
    if (!options_.metrics_address.empty()) {
      clients.back()->set_up_gauge(StageUpGauge(pipeline_.name, i, addresses_[i]));
    }
  }
  fleet_->Connect(std::move(clients));
  return ParallelFor(p, [&](int i) { return fleet_->client(i).WaitReady(options_.connect_timeout, stop_); });
}

// Configures every stage with its slice; the fleet learns which LoRA parameters each holds, and forgets what their
// RoPE caches held (a Configure empties them).
absl::Status StageSet::Configure() {
  const int p = fleet_->size();
  std::vector<std::vector<std::string>> params(p);
  absl::Status configured = ParallelFor(p, [&](int i) -> absl::Status {
    ASSIGN_OR_RETURN(v1::ConfigureResponse resp, fleet_->client(i).Configure(ConfigureRequestFor(i)));
    params[i].assign(resp.lora_param_names().begin(), resp.lora_param_names().end());
    return absl::OkStatus();
  });
  fleet_->Configured(std::move(params));  // the caches are empty even where it failed
  return configured;
}

v1::ConfigureRequest StageSet::ConfigureRequestFor(int i) const {
  v1::ConfigureRequest req =
      baton::ConfigureRequestFor(pipeline_, plan_[i], i, addresses_, replica_, options_.FirstWorker(replica_));
  req.set_generation(fleet_->generation());
  req.set_shared(options_.shared_stages);
  req.set_run_id(fleet_->run_id());
  return req;
}

std::string StageSet::Describe(int stage) {
  LocalWorkers* const workers = local();
  return workers ? workers->Describe(stage) : "";
}

std::vector<int> StageSet::Lost(int suspect) {
  const int p = static_cast<int>(addresses_.size());
  // A quick health check tells who is gone, including a process still dying.
  std::vector<absl::Status> quick(p);
  LocalWorkers* const local = this->local();
  (void)ParallelFor(p, [&](int i) {
    quick[i] = i == suspect || (local && !local->Alive(i))
                   ? absl::UnavailableError("lost")
                   : StageClient(i, addresses_[i], options_.rpc_timeout).WaitReady(absl::Seconds(2), stop_);
    return absl::OkStatus();
  });
  std::vector<int> lost;
  for (int i = 0; i < p; ++i) {
    if (!quick[i].ok()) lost.push_back(i);
  }
  return lost;
}

absl::Status StageSet::RestartLocal(const std::vector<int>& lost) {
  for (int i : lost) {
    if (stop_()) return absl::CancelledError("stopped while restarting a stage worker");
    const absl::Duration timeout = options_.worker_restart_timeout;
    auto address = options_.shared_workers  // another pipeline may have restarted it already
                       ? options_.shared_workers->Revive(i, addresses_[i], timeout)
                       : local_->Restart(i, timeout);
    if (!address.ok()) {
      return Annotate(address.status(), absl::StrCat("stage ", i, " (", addresses_[i], ") could not be restarted"));
    }
    addresses_[i] = *address;
  }
  return absl::OkStatus();
}

absl::Status StageSet::AwaitRemote(const std::vector<int>& lost) {
  // Said while it lasts (OutageWatch): which stage does not answer, and for how long.
  const std::string doing =
      absl::StrCat("waiting up to ", absl::FormatDuration(options_.worker_restart_timeout), " for it to come back");
  return ParallelFor(static_cast<int>(lost.size()), [&](int k) -> absl::Status {
    const int i = lost[k];
    const double silent = fleet_->client(i).SecondsSinceHeard();  // the outage began before its step failed
    StageClient client(i, addresses_[i], options_.rpc_timeout);
    absl::Status s = client.WaitReady(options_.worker_restart_timeout, [&] {
      if (stop_()) return true;
      fleet_->outages().Silent(i, client.name(), silent, doing);
      return false;
    });
    if (s.ok()) fleet_->outages().Answered(i);
    if (s.ok() || absl::IsCancelled(s)) return s;
    return absl::DeadlineExceededError(absl::StrCat("stage ", i, " (", addresses_[i], ") did not come back within ",
                                                    absl::FormatDuration(options_.worker_restart_timeout), ": ",
                                                    s.message()));
  });
}

absl::StatusOr<std::vector<int>> StageSet::Recover(int suspect) {
  const std::vector<int> lost = Lost(suspect);
  // Local workers are restarted; remote ones get worker_restart_timeout to answer again (systemd/Kubernetes).
  RETURN_IF_ERROR(options_.shared_workers || local_ ? RestartLocal(lost) : AwaitRemote(lost));
  fleet_->NewGeneration();
  RETURN_IF_ERROR(Connect());
  RETURN_IF_ERROR(Configure());
  // A restarted local worker, one that answered its health check late, or another in its place (a new address).
  std::vector<std::string> names;
  for (int i = 0; i < fleet_->size(); ++i) names.push_back(fleet_->name(i));
  fleet_->outages().AnsweredAllAs(names);
  return lost;
}

LocalWorkers* StageSet::local() { return options_.shared_workers ? options_.shared_workers->workers() : local_.get(); }

void StageSet::ReleaseOnSharedWorkers() {
  if (!options_.shared_stages || released_) return;  // the workers go on serving the others: only this pipeline ends
  released_ = true;
  for (int i = 0; i < fleet_->size(); ++i) (void)fleet_->client(i).Release(pipeline_.id);
}

absl::Status StageSet::Stop() {
  ReleaseOnSharedWorkers();
  if (!local_) return absl::OkStatus();  // remote or shared workers: their owners stop them
  for (int i = 0; i < fleet_->size(); ++i) (void)fleet_->client(i).Shutdown();
  return local_->Stop();
}

}  // namespace baton
