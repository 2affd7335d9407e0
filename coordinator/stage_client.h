// The coordinator's handle on one stage worker: every RPC with a deadline, every error prefixed with the
// stage's index and address (and the step where there is one), so a dead or absent worker is named.
#pragma once

#include <absl/status/statusor.h>
#include <absl/time/time.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/gauge.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "baton/v1/stage.grpc.pb.h"
#include "core/pipeline/stage_io.h"

namespace baton {

class StageClient {
 public:
  StageClient(int index, std::string address, absl::Duration rpc_timeout);

  int index() const { return index_; }
  const std::string& address() const { return address_; }
  std::string name() const;  // "stage 1 (127.0.0.1:5001)"
  // After every call: 1 if the worker answered (even with an error), 0 if it could not be reached
  // (UNAVAILABLE, or WaitReady timing out). Optional (baton_stage_up).
  void set_up_gauge(prometheus::Gauge* gauge) { up_ = gauge; }

  // Waits until the channel connects and the health service says StageService is SERVING, up to `timeout`.
  // A server that is not a stage worker (e.g. --workers pointing at an encoder worker) is FAILED_PRECONDITION.
  // `stop` (optional) is polled while waiting: once true, CANCELLED at once.
  absl::Status WaitReady(absl::Duration timeout, const std::function<bool()>& stop = nullptr);
  absl::StatusOr<v1::ConfigureResponse> Configure(const v1::ConfigureRequest& request);
  absl::Status Push(const v1::EnvelopeHeader& header, const TensorMap& tensors);
  // Runs the plan; fills `grads` with the stage's summed LoRA gradients. Cancel() aborts it from another thread.
  absl::StatusOr<v1::StepSummary> RunStep(const v1::StepPlan& plan, TensorMap* grads);
  absl::StatusOr<TensorMap> GetLora(const std::string& job_id);
  absl::Status Shutdown();
  // Aborts the running RunStep and Pushes, and every later one until Rearm() (a step that failed elsewhere).
  void Cancel();
  void Rearm();

  // For the step executor's stall watch, while RunStep runs: seconds since its stream last said anything (a
  // heartbeat or a gradient chunk; 0 when no RunStep runs), the last heartbeat, and the age of the oldest Push in
  // flight (0: none).
  double SilentSeconds() const;
  v1::StageHeartbeat LastHeartbeat() const;
  double OldestPushSeconds() const;

 private:
  absl::Status Named(const absl::Status& s, const std::string& what) const;

  int index_;
  std::string address_;
  absl::Duration rpc_timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::StageService::Stub> stub_;
  prometheus::Gauge* up_ = nullptr;
  using Clock = std::chrono::steady_clock;
  // Registers a call for Cancel(); false (and nothing registered) when already cancelled.
  bool Begin(grpc::ClientContext* ctx);
  void End(grpc::ClientContext* ctx);

  mutable std::mutex mu_;
  std::map<grpc::ClientContext*, Clock::time_point> active_;  // running Pushes and when they began, for Cancel()
  grpc::ClientContext* run_ = nullptr;                        // the running RunStep, for Cancel()
  bool cancelled_ = false;
  bool stepping_ = false;    // a RunStep's stream is open
  Clock::time_point heard_;  // its last message
  v1::StageHeartbeat beat_;  // its last heartbeat
};

}  // namespace baton
