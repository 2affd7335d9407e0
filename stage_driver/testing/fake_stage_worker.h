// A fake stage worker for the stage driver's unit tests: a real gRPC StageService in the test's own process (no
// stage_worker process, no model), so the driver's real clients, fleet, recovery and stall watch run against it.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "proto/baton/v1/stage.grpc.pb.h"
#include "stage_driver/testing/fake_optimizer.h"
#include "wire/envelope.h"

namespace baton {

// What the fake does when a RunStep arrives.
enum class FakeRun {
  kAnswer,         // gradients (or, for a forward-only pass, "output/<micro-batch>") and a summary
  kFail,           // the status given to Fail()
  kStallSilently,  // one heartbeat, then nothing until the call is cancelled
  kWaitForData,    // heartbeats "waiting for INPUTS ... from the driver" (waiting_on -1) until cancelled
  kNoSummary,      // gradients, then the stream ends without a summary
  kBadChunk,       // a gradient chunk without its header
};

// It answers Configure with the LoRA names it was given, keeps what is pushed or loaded into it, and answers RunStep
// with one gradient per name (each element (step + 1 + the name's index) x its micro-batches: the test can tell
// which step it is and how many micro-batches it ran) and a summary (micro-batch i's loss 0.5 + its step-wide index);
// or plays the fault it was told to: fail with a status, stall in silence or while saying it waits for the
// driver's data, send a reply without a summary or a gradient chunk that does not assemble. A plan that holds its
// gradients (HOLD_NEW, HOLD_ADD) gives them to its stage-local optimizer instead (fake_optimizer.h: JoinGroup, Reduce,
// Update, LoadState and GetLora's state). It can be killed (losing that state) and restarted at the same address, as
// systemd or Kubernetes restart a remote worker.
class FakeStageWorker {
 public:
  // Listens on 127.0.0.1:`port` (0: a free port). `lora_names`: the adapters it holds; each gradient has `numel`
  // elements.
  static absl::StatusOr<std::unique_ptr<FakeStageWorker>> Start(std::vector<std::string> lora_names, int numel = 4,
                                                                int port = 0);
  ~FakeStageWorker();

  const std::string& address() const { return address_; }
  // The next `times` RunSteps (of training steps and passes alike) do `what`; after them it answers again.
  void Play(FakeRun what, int times = 1) ABSL_LOCKS_EXCLUDED(mu_);
  void Fail(absl::Status status, int times = 1) ABSL_LOCKS_EXCLUDED(mu_);
  // The next call of RPC `rpc` ("Configure", "JoinGroup", "Reduce", "Update", "LoadState", "GetLora") fails with
  // `status` (a Configure is still recorded); a
  // failed Reduce fails its group's sum for the other members too.
  void FailCall(const std::string& rpc, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Kills the server at once (calls in flight fail), as a killed process; Restart serves the same address again.
  void Kill();
  absl::Status Restart();

  std::vector<v1::ConfigureRequest> configures() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<ReceivedEnvelope> pushes() const ABSL_LOCKS_EXCLUDED(mu_);  // in arrival order
  std::vector<v1::StepPlan> plans() const ABSL_LOCKS_EXCLUDED(mu_);
  int cancelled_runs() const ABSL_LOCKS_EXCLUDED(mu_);  // RunSteps that ended because the driver cancelled them
  void ClearRecords() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Service;
  explicit FakeStageWorker(std::vector<std::string> names);
  absl::Status TakeFault(const std::string& rpc) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Serve(int port);
  // What the next RunStep does (and the status of a kFail).
  FakeRun Next(absl::Status* failure) ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<std::string> names_;
  int numel_ = 4;
  std::string address_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::vector<FakeRun> script_ ABSL_GUARDED_BY(mu_);  // front first
  std::vector<absl::Status> failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<absl::Status>> call_faults_ ABSL_GUARDED_BY(mu_);  // by RPC, front first
  FakeLocalOptimizer optimizer_;  // its stage-local optimizer (thread-safe); emptied when killed
  std::vector<v1::ConfigureRequest> configures_ ABSL_GUARDED_BY(mu_);
  std::vector<ReceivedEnvelope> pushes_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::StepPlan> plans_ ABSL_GUARDED_BY(mu_);
  int cancelled_runs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton
