// The driver's handle on one stage worker: every RPC with a deadline, every error prefixed with the
// stage's index and address (and the step where there is one), so a dead or absent worker is named.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/gauge.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "baton/v1/stage.grpc.pb.h"
#include "core/model/stage_io.h"

namespace baton {

// Bytes between the driver and its stages (both directions, the messages' serialized sizes), by what they carry.
// Shared by a fleet's clients, so it outlives a client replaced by a recovery. Thread-safe.
struct LinkTraffic {
  std::atomic<uint64_t> data{0};        // what a step computes on: activations, inputs, constants, targets, RoPE tables
  std::atomic<uint64_t> adapters{0};    // the LoRA, its gradients and its optimizer state, whichever way they travel
  std::atomic<uint64_t> control{0};     // plans, summaries, Configure, the stage-local optimizer's calls
  std::atomic<uint64_t> heartbeats{0};  // the stall watch's, one a second from each stage running a step
};
// A reading of LinkTraffic (sums, differences).
struct TrafficBytes {
  uint64_t data = 0, adapters = 0, control = 0, heartbeats = 0;
  TrafficBytes& operator+=(const LinkTraffic& t);
  TrafficBytes& operator+=(const TrafficBytes& t);
  TrafficBytes operator-(const TrafficBytes& earlier) const;
};

class StageClient {
 public:
  StageClient(int index, std::string address, absl::Duration rpc_timeout);

  int index() const { return index_; }
  const std::string& address() const { return address_; }
  std::string name() const;  // "stage 1 (127.0.0.1:5001)"
  // After every call: 1 if the worker answered (even with an error), 0 if it could not be reached
  // (UNAVAILABLE, or WaitReady timing out). Optional (baton_stage_up).
  void set_up_gauge(prometheus::Gauge* gauge) { up_ = gauge; }
  // Where this client counts its bytes (optional; set before the first call).
  void set_traffic(std::shared_ptr<LinkTraffic> traffic) { traffic_ = std::move(traffic); }
  // The driving process, as every envelope this client sends names it (set before the first call).
  void set_sender(std::string sender) { sender_ = std::move(sender); }
  const std::string& sender() const { return sender_; }

  // Waits until the channel connects and the health service says StageService is SERVING, up to `timeout`.
  // A server that is not a stage worker (e.g. --workers pointing at an encoder worker) is FAILED_PRECONDITION.
  // `stop` (optional) is polled while waiting: once true, CANCELLED at once.
  absl::Status WaitReady(absl::Duration timeout, const std::function<bool()>& stop = nullptr);
  absl::StatusOr<v1::ConfigureResponse> Configure(const v1::ConfigureRequest& request);
  // Sends one envelope; its header's sender is this client's (set_sender).
  absl::Status Push(const v1::EnvelopeHeader& header, const TensorMap& tensors);
  // Runs the plan; fills `grads` with the stage's summed LoRA gradients. Cancel() aborts it from another thread.
  absl::StatusOr<v1::StepSummary> RunStep(const v1::StepPlan& plan, TensorMap* grads) ABSL_LOCKS_EXCLUDED(mu_);
  // The adapters; with `optimizer_state`, the stage-local optimizer's state too (stage.proto's LoadState names).
  absl::StatusOr<TensorMap> GetLora(const std::string& job_id, bool optimizer_state = false);
  // A stage-local optimizer's exchange (stage.proto's JoinGroup, Reduce, Update, LoadState). JoinGroup and Reduce wait
  // for the whole group: their deadline is `wait` past the RPC timeout. The job id is filled in.
  absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const std::string& job_id, v1::JoinGroupRequest request,
                                                  absl::Duration wait);
  absl::StatusOr<v1::ReduceResponse> Reduce(const std::string& job_id, int64_t step, absl::Duration wait);
  absl::StatusOr<v1::UpdateResponse> Update(const std::string& job_id, v1::UpdateRequest request);
  absl::Status LoadState(const std::string& job_id, const TensorMap& state);
  absl::Status Shutdown();
  // Ends this client's pipeline on a worker it shares with others (ReleaseRequest).
  absl::Status Release(const std::string& pipeline_id);
  // Aborts the running RunStep and Pushes, and every later one until Rearm() (a step that failed elsewhere).
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  void Rearm() ABSL_LOCKS_EXCLUDED(mu_);

  // For the step executor's stall watch, while RunStep runs: seconds since its stream last said anything (a
  // heartbeat or a gradient chunk; 0 when no RunStep runs), the last heartbeat, and the age of the oldest Push in
  // flight (0: none).
  double SilentSeconds() const ABSL_LOCKS_EXCLUDED(mu_);
  // Seconds since the last RunStep's stream last said anything (or began), whether or not one runs now; 0 before the
  // first RunStep. The recovery's OutageWatch starts a silence there.
  double SecondsSinceHeard() const ABSL_LOCKS_EXCLUDED(mu_);
  v1::StageHeartbeat LastHeartbeat() const ABSL_LOCKS_EXCLUDED(mu_);
  double OldestPushSeconds() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status Named(const absl::Status& s, const std::string& what) const;
  void Count(std::atomic<uint64_t> LinkTraffic::*kind, uint64_t bytes) const;
  void CountControl(const google::protobuf::Message& a, const google::protobuf::Message& b) const;

  int index_;
  std::string address_;
  absl::Duration rpc_timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::StageService::Stub> stub_;
  prometheus::Gauge* up_ = nullptr;       // set before the first call, then only read
  std::shared_ptr<LinkTraffic> traffic_;  // likewise
  std::string sender_ = "stage_driver";
  using Clock = std::chrono::steady_clock;
  // Registers a call for Cancel(); false (and nothing registered) when already cancelled.
  bool Begin(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(mu_);
  void End(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  // Running Pushes and when they began, for Cancel().
  std::map<grpc::ClientContext*, Clock::time_point> active_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* run_ ABSL_GUARDED_BY(mu_) = nullptr;  // the running RunStep, for Cancel()
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool stepping_ ABSL_GUARDED_BY(mu_) = false;    // a RunStep's stream is open
  Clock::time_point heard_ ABSL_GUARDED_BY(mu_);  // its last message
  v1::StageHeartbeat beat_ ABSL_GUARDED_BY(mu_);  // its last heartbeat
};

}  // namespace baton
