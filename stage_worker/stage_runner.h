// StageRunner: everything a stage worker does, without RPC code (the gRPC service only translates).
// It holds one contiguous block range of the FLUX.2 transformer with LoRA adapters, receives envelopes
// into its inbox, and executes a step plan (the schedule's F/B actions for this stage): forward with the
// constants the coordinator sent, activations sent straight to the next stage, backward (with recompute:
// block by block from the block inputs the forward kept, one block's graph at a time; without: through the
// graph the forward kept), input gradients sent upstream, LoRA gradients
// summed over the micro-batches in action order and handed back at the end of the step.
// Thread-safety: Deliver() may run concurrently with RunStep(); Configure() and RunStep() serialize.
#pragma once

#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "baton/v1/stage.pb.h"
#include "core/device/transfer.h"
#include "core/model/flux2_model.h"
#include "core/model/flux2_weights.h"
#include "core/pipeline/stage_io.h"
#include "rpc/envelope.h"
#include "stage_worker/inbox.h"
#include "stage_worker/peer_sender.h"

namespace baton {

struct StageRunnerOptions {
  std::string address;  // our own listen address (for messages)
  std::string device = "cpu";
  absl::Duration wait_timeout = absl::Seconds(300);  // any single wait for data from a peer
  size_t rope_cache_entries = kRopeCacheEntries;     // FIFO; the coordinator mirrors it
};

class StageRunner {
 public:
  explicit StageRunner(StageRunnerOptions options);
  ~StageRunner();

  absl::StatusOr<v1::ConfigureResponse> Configure(const v1::ConfigureRequest& request);
  // Routes an envelope from a Push: ROPE into the RoPE cache, everything else into the inbox.
  absl::Status Deliver(ReceivedEnvelope envelope);
  // Whether incoming tensors should be assembled in pinned host memory (the stage computes on CUDA).
  bool wants_pinned_host() const { return pinned_host_.load(); }

  using GradSink = std::function<absl::Status(const std::string& name, const at::Tensor& grad)>;
  // Runs the plan's actions; streams this stage's summed LoRA gradients to `sink` (sorted by name) and
  // returns the step summary. `cancelled` is polled while waiting for data.
  absl::StatusOr<v1::StepSummary> RunStep(const v1::StepPlan& plan, const std::function<bool()>& cancelled,
                                          const GradSink& sink);

  // Current adapter weights (fp32, CPU), PEFT names.
  absl::StatusOr<TensorMap> CurrentLora();
  std::string name() const;
  // Our own address, known only once the server has bound its port.
  void set_address(const std::string& address) { options_.address = address; }

 private:
  struct MicroBatchState {
    Flux2Activations input;  // leaves; require grad on stages after the first
    Flux2Constants constants;
    std::vector<Flux2Activations> checkpoints;  // with recompute: every block's input (the first is `input`)
    Flux2Activations output;                    // kept only without recompute
    at::Tensor target;                          // last stage
    at::Tensor loss;                            // last stage, without recompute
  };

  absl::Status Forward(const v1::StepPlan& plan, int32_t mb, const std::function<bool()>& cancelled,
                       std::map<int32_t, MicroBatchState>& states, v1::StepSummary& summary);
  absl::Status Backward(const v1::StepPlan& plan, int32_t mb, const std::function<bool()>& cancelled,
                        std::map<int32_t, MicroBatchState>& states, v1::StepSummary& summary);
  // The stage forward: with a graph, or (recompute) without one, keeping the per-block checkpoints.
  Flux2Activations RunBlocks(MicroBatchState& state, const v1::StepPlan& plan, int32_t mb);
  absl::StatusOr<TensorMap> Await(const v1::StepPlan& plan, int32_t mb, v1::EnvelopeHeader::Kind kind,
                                  const std::function<bool()>& cancelled, v1::StepSummary& summary);
  v1::EnvelopeHeader Header(const v1::StepPlan& plan, int32_t mb, v1::EnvelopeHeader::Kind kind) const;

  StageRunnerOptions options_;
  std::mutex run_mu_;  // Configure / RunStep
  Inbox inbox_;

  // Set by Configure (guarded by run_mu_; read by Deliver only through the rope cache below).
  v1::ConfigureRequest config_;
  bool configured_ = false;
  std::unique_ptr<Flux2Checkpoint> checkpoint_;
  Flux2Stage stage_{nullptr};
  at::ScalarType dtype_ = at::kFloat;
  at::Device device_{at::kCPU};
  std::unique_ptr<DeviceTransfer> transfer_;  // host → device uploads (side stream + pinned memory on CUDA)
  std::atomic<bool> pinned_host_{false};      // read by Push handlers without run_mu_
  std::unique_ptr<PeerSender> next_, prev_;

  std::mutex rope_mu_;
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> rope_;  // key → (cos, sin) on device
  std::deque<std::string> rope_order_;                             // FIFO eviction
  uint64_t bytes_received_ = 0;
};

}  // namespace baton
