// A stage worker's metrics (core/metrics/families.h StageFamilies) bound to the job and stage it is configured
// for: compute and idle seconds, micro-batches in flight, and per-link bytes and transfer seconds (peer
// "stage<N>" or "coordinator"). Before Configure the worker shows baton_worker_configured{job="",stage=""} 0
// and counts nothing. Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <cstdint>
#include <map>
#include <string>

namespace baton {

// One link's counters; null members (an unconfigured worker) count nothing.
struct LinkCounters {
  prometheus::Counter* sent_bytes = nullptr;
  prometheus::Counter* received_bytes = nullptr;
  prometheus::Counter* transfer_seconds = nullptr;
  prometheus::Gauge* queued_bytes = nullptr;  // the peer sender's queue (sending links only)

  void Sent(uint64_t bytes, double seconds) const;
  void SetQueued(uint64_t bytes) const;
  void Received(uint64_t bytes, double seconds) const;
};

class StageInstruments {
 public:
  StageInstruments();
  // A pipeline's runner that goes (released from a shared worker) takes its gauges with it: the worker no longer
  // shows baton_worker_configured 1 nor micro-batches in flight for a job it does not hold. Its counters stay.
  ~StageInstruments();

  // Binds the labels (job: the job's name, "unnamed" when empty; stage; replica) and sets baton_worker_configured
  // to 1 for them; the previous binding's configured series goes away.
  void Configure(const std::string& job, int stage, int replica = 0);
  void AddForwardSeconds(double s);
  void AddBackwardSeconds(double s);
  void AddIdleSeconds(double s);
  void SetInFlight(size_t micro_batches);
  // The counters of the link to `peer` ("stage1", "coordinator").
  LinkCounters Link(const std::string& peer);

  // An envelope's sender ("stage 1 (10.0.0.2:7001)", "coordinator") as a peer label: "stage1", "coordinator".
  static std::string PeerLabel(const std::string& sender);

 private:
  // Drops this instrument's binding of its labels; the last binding's gauges are removed.
  void UnbindLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::string job_ ABSL_GUARDED_BY(mu_), stage_ ABSL_GUARDED_BY(mu_), replica_ ABSL_GUARDED_BY(mu_);  // empty: none
  prometheus::Gauge* configured_ ABSL_GUARDED_BY(mu_) = nullptr;
  prometheus::Counter* forward_ ABSL_GUARDED_BY(mu_) = nullptr;
  prometheus::Counter* backward_ ABSL_GUARDED_BY(mu_) = nullptr;
  prometheus::Counter* idle_ ABSL_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<std::string, LinkCounters> links_ ABSL_GUARDED_BY(mu_);  // by peer, for the current binding
};

}  // namespace baton
