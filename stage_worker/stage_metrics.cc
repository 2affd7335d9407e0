#include "stage_worker/stage_metrics.h"

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

#include <map>

#include "core/metrics/families.h"

namespace baton {

void LinkCounters::Sent(uint64_t bytes, double seconds) const {
  if (sent_bytes == nullptr) return;
  sent_bytes->Increment(static_cast<double>(bytes));
  transfer_seconds->Increment(seconds);
}

void LinkCounters::SetQueued(uint64_t bytes) const {
  if (queued_bytes != nullptr) queued_bytes->Set(static_cast<double>(bytes));
}

void LinkCounters::Received(uint64_t bytes, double seconds) const {
  if (received_bytes == nullptr) return;
  received_bytes->Increment(static_cast<double>(bytes));
  transfer_seconds->Increment(seconds);
}

namespace {

// Runners bound to the same labels (every unconfigured runner; the same job name twice on one shared worker) share
// their series: the last binding to go removes them, so no runner is left holding a removed gauge. Adding and
// removing the series happen under the same lock as the count (taken after a StageInstruments' own mu_).
absl::Mutex bindings_mu(absl::kConstInit);
std::map<prometheus::Labels, int>& Bindings() ABSL_EXCLUSIVE_LOCKS_REQUIRED(bindings_mu) {
  static auto* bindings = new std::map<prometheus::Labels, int>;
  return *bindings;
}

const prometheus::Labels kUnconfigured = {{"job", ""}, {"stage", ""}};

}  // namespace

StageInstruments::StageInstruments() {
  absl::MutexLock lock(&bindings_mu);
  ++Bindings()[kUnconfigured];
  configured_ = &StageFamilies().worker_configured.Add(kUnconfigured);
  configured_->Set(0);
}

StageInstruments::~StageInstruments() {
  absl::MutexLock lock(&mu_);
  UnbindLocked();
}

void StageInstruments::UnbindLocked() {
  const prometheus::Labels labels =
      job_.empty() ? kUnconfigured : prometheus::Labels{{"job", job_}, {"stage", stage_}, {"replica", replica_}};
  absl::MutexLock lock(&bindings_mu);
  auto it = Bindings().find(labels);
  if (it == Bindings().end() || --it->second > 0) return;
  Bindings().erase(it);
  StageMetrics& m = StageFamilies();
  m.worker_configured.Remove(configured_);
  if (in_flight_ != nullptr) m.microbatches_in_flight.Remove(in_flight_);
}

void StageInstruments::Configure(const std::string& job, int stage, int replica) {
  StageMetrics& m = StageFamilies();
  absl::MutexLock lock(&mu_);
  const std::string job_label = job.empty() ? "unnamed" : job, stage_label = absl::StrCat(stage),
                    replica_label = absl::StrCat(replica);
  if (job_label == job_ && stage_label == stage_ && replica_label == replica_) return;
  UnbindLocked();
  job_ = job_label;
  stage_ = stage_label;
  replica_ = replica_label;
  const prometheus::Labels labels = {{"job", job_}, {"stage", stage_}, {"replica", replica_}};
  absl::MutexLock bind(&bindings_mu);
  ++Bindings()[labels];
  configured_ = &m.worker_configured.Add(labels);
  configured_->Set(1);
  forward_ = &m.forward_seconds.Add(labels);
  backward_ = &m.backward_seconds.Add(labels);
  idle_ = &m.idle_seconds.Add(labels);
  in_flight_ = &m.microbatches_in_flight.Add(labels);
  in_flight_->Set(0);
  links_.clear();
}

void StageInstruments::AddForwardSeconds(double s) {
  absl::MutexLock lock(&mu_);
  if (forward_) forward_->Increment(s);
}

void StageInstruments::AddBackwardSeconds(double s) {
  absl::MutexLock lock(&mu_);
  if (backward_) backward_->Increment(s);
}

void StageInstruments::AddIdleSeconds(double s) {
  absl::MutexLock lock(&mu_);
  if (idle_) idle_->Increment(s);
}

void StageInstruments::SetInFlight(size_t micro_batches) {
  absl::MutexLock lock(&mu_);
  if (in_flight_) in_flight_->Set(static_cast<double>(micro_batches));
}

LinkCounters StageInstruments::Link(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  if (job_.empty()) return {};
  auto it = links_.find(peer);
  if (it != links_.end()) return it->second;
  StageMetrics& m = StageFamilies();
  const prometheus::Labels labels = {{"job", job_}, {"stage", stage_}, {"replica", replica_}, {"peer", peer}};
  LinkCounters link{&m.link_sent_bytes.Add(labels), &m.link_received_bytes.Add(labels),
                    &m.link_transfer_seconds.Add(labels), &m.link_queued_bytes.Add(labels)};
  links_[peer] = link;
  return link;
}

std::string StageInstruments::PeerLabel(const std::string& sender) {
  absl::string_view rest = sender;
  if (absl::ConsumePrefix(&rest, "stage ")) {
    const size_t end = rest.find_first_not_of("0123456789");
    const absl::string_view digits = rest.substr(0, end);
    if (!digits.empty()) return absl::StrCat("stage", digits);
  }
  return "coordinator";
}

}  // namespace baton
