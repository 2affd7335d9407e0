// Sends envelopes to one neighbour stage (activations downstream, gradients upstream) from a background
// thread, so compute never waits on the network. Sends keep their order. A failed send is sticky: every
// later call reports it, naming the peer, so the step fails with a clear error instead of hanging.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "baton/v1/stage.grpc.pb.h"
#include "core/model/stage_io.h"
#include "stage_worker/stage_metrics.h"
#include "wire/wire_compression.h"

namespace baton {

class PeerSender {
 public:
  static constexpr uint64_t kDefaultQueueBytes = uint64_t{1} << 30;

  // `peer_name` is used in errors, e.g. "stage 1 (127.0.0.1:5001)".
  // `wire_dtype` compresses the floating tensors sent (wire/wire_compression.h); kNone sends them exactly.
  // `link` counts the bytes sent and the seconds each Push took (baton_link_*{peer}) and shows the queue.
  // `max_queued_bytes` bounds the host memory waiting to be sent (queued or in flight; on CUDA pinned).
  PeerSender(const std::string& address, std::string peer_name, absl::Duration timeout,
             WireDtype wire_dtype = WireDtype::kNone, LinkCounters link = {},
             uint64_t max_queued_bytes = kDefaultQueueBytes);
  ~PeerSender();

  // `ready`, if set, runs on the sender's thread before the tensors are read (e.g. waits for a device → host copy).
  // Waits (backpressure on the compute thread) while the queue holds something and this bundle would take it past
  // max_queued_bytes; never waits on a failed or stopping sender (the failure is reported by Flush).
  void Send(v1::EnvelopeHeader header, TensorMap tensors, std::function<void()> ready = nullptr);
  // Bytes queued or in flight now.
  uint64_t queued_bytes() const;
  // Whether a send has failed (Flush returns the error).
  bool failed() const;
  // Waits until everything queued has been delivered; returns the first error, if any.
  absl::Status Flush(absl::Duration timeout);
  uint64_t bytes_sent() const;
  // Seconds the push now in flight has taken so far; 0 when none is (the step's heartbeat reports it, so a
  // stalled link is told from a stalled stage).
  double busy_seconds() const;
  const std::string& peer_name() const { return peer_name_; }

 private:
  void Loop();

  struct Item {
    v1::EnvelopeHeader header;
    TensorMap tensors;
    std::function<void()> ready;
    uint64_t bytes = 0;  // BundleBytes(tensors)
  };

  const std::string peer_name_;
  const absl::Duration timeout_;
  const WireDtype wire_dtype_;
  const LinkCounters link_;
  std::unique_ptr<v1::StageService::Stub> stub_;  // set in the constructor, then used by the sender's thread only
  const uint64_t max_queued_bytes_;
  mutable absl::Mutex mu_;
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // items in queue_ plus the one in flight
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point busy_since_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;  // the push in flight, cancelled by the destructor
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace baton
