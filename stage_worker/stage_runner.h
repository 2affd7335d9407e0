// StageRunner: everything a stage worker does, without RPC code (the gRPC service only translates): it holds
// a block range of the model with LoRA adapters, receives envelopes into its inbox and executes the step plans
// the coordinator sends.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/statusor.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/v1/stage.pb.h"
#include "core/device/device_spans.h"
#include "core/device/kineto_trace.h"
#include "core/device/transfer.h"
#include "core/model/model_family.h"
#include "core/model/stage_build.h"
#include "core/model/stage_io.h"
#include "stage_worker/compute_turns.h"
#include "stage_worker/host_state_copy.h"
#include "stage_worker/inbox.h"
#include "stage_worker/local_optimizer.h"
#include "stage_worker/peer_sender.h"
#include "stage_worker/request_checks.h"
#include "stage_worker/stage_metrics.h"
#include "stage_worker/step_progress.h"
#include "wire/envelope.h"

namespace baton {

struct StageRunnerOptions {
  std::string address;  // our own listen address (for messages)
  std::string device = "cpu";
  absl::Duration wait_timeout = absl::Seconds(300);      // any single wait for data from a peer
  size_t rope_cache_entries = kRopeCacheEntries;         // FIFO; the coordinator mirrors it
  absl::Duration heartbeat_interval = absl::Seconds(1);  // RunStep's progress heartbeats
  uint64_t inbox_bytes = Inbox::kDefaultBudgetBytes;     // pushed bytes waiting to be used (--inbox_bytes)
  // Bytes queued for one neighbour and not yet sent (--send_queue_bytes): the compute thread waits before queueing
  // more. On CUDA the pinned host allocator's cache is trimmed after a step once it holds more than
  // inbox_bytes + 2 x send_queue_bytes (everything that may legitimately be pinned at once).
  uint64_t send_queue_bytes = PeerSender::kDefaultQueueBytes;
  std::string model_root;  // models are read only from inside it ("" = working dir)
  // Shared by the pipelines one worker holds (StageTenants): each forward or backward computes holding a turn, so
  // they take turns on the worker's compute, one action at a time, and one pipeline's wait is another's work. Null:
  // none.
  std::shared_ptr<ComputeTurns> compute_turns;
};

// A runner holds one contiguous block range of the model (any ModelFamily) with LoRA adapters -- or, for the
// interleaved schedule, v such ranges (model chunks, non-contiguous; chunk c is virtual stage c·p + stage_index)
// -- receives envelopes into its inbox, and executes a step plan (the schedule's F/B actions for this stage, each
// naming its chunk): forward with the constants the coordinator sent, activations sent straight to the next
// stage, backward (with recompute: block by block from the block inputs the forward kept, one block's graph at a
// time; without: through the graph the forward kept), input gradients sent upstream, LoRA gradients summed over
// the micro-batches in action order and handed back at the end of the step. A chunk's output goes to the next
// virtual stage: chunk c on the next worker, or -- from the last worker -- chunk c+1 on worker 0 (its
// next_address wraps around); input gradients go the opposite way. The step's adapter weights are awaited just
// before the first computation, not at the start: a stage that first waits for activations receives its weights
// meanwhile (the step boundary overlaps the upstream stages' first forwards).
// Thread-safety: Deliver() may run concurrently with RunStep(); Configure() and RunStep() serialize.
class StageRunner {
 public:
  explicit StageRunner(StageRunnerOptions options);
  ~StageRunner();

  // Checks the whole request (configure_checks.h) before it lets go of the running job: an invalid Configure
  // leaves the worker serving the job it had. `shared` (per chunk): the frozen tensors of another pipeline's stage
  // with the same FrozenWeightsKey (rpc/frozen_key.h), used instead of loading the model's (null: load).
  absl::StatusOr<v1::ConfigureResponse> Configure(const v1::ConfigureRequest& request,
                                                  const std::vector<FrozenTensors>* shared = nullptr)
      ABSL_LOCKS_EXCLUDED(run_mu_);
  // This stage's frozen tensors per chunk when it is built for `key` (else empty); without run_mu_.
  std::vector<FrozenTensors> FrozenFor(const std::string& key) const ABSL_LOCKS_EXCLUDED(frozen_mu_);
  // Whether a Push with this header may be read at all (request_checks.h): the configured job, the step
  // window, the kind and ranges. Run before the tensors are received.
  absl::Status CheckPushHeader(const v1::EnvelopeHeader& header) const;
  // Bytes a Push may still bring (the inbox's free budget).
  uint64_t push_budget_bytes() const { return inbox_.free_bytes(); }
  uint64_t inbox_budget_bytes() const { return inbox_.budget(); }
  // Checks an envelope from a Push (CheckEnvelope) and routes it: ROPE into the RoPE cache, everything else into
  // the inbox (RESOURCE_EXHAUSTED over its budget).
  absl::Status Deliver(ReceivedEnvelope envelope);
  // Whether incoming tensors should be assembled in pinned host memory (the stage computes on CUDA).
  bool wants_pinned_host() const { return pinned_host_.load(); }

  using GradSink = std::function<absl::Status(const std::string& name, const at::Tensor& grad)>;
  using Heartbeat = std::function<void(const v1::StageHeartbeat&)>;
  // Runs the plan's actions; streams this stage's summed LoRA gradients to `sink` (sorted by name) and
  // returns the step summary. `cancelled` is polled while waiting for data; a Configure of a newer generation
  // cancels the step too. `heartbeat` (optional) gets the step's progress every heartbeat_interval, from another
  // thread, until RunStep returns.
  absl::StatusOr<v1::StepSummary> RunStep(const v1::StepPlan& plan, const std::function<bool()>& cancelled,
                                          const GradSink& sink, const Heartbeat& heartbeat = nullptr)
      ABSL_LOCKS_EXCLUDED(run_mu_);

  // Current adapter weights (fp32, CPU), PEFT names; only to the configured job. With `optimizer_state`, the
  // stage-local optimizer's state too (LocalOptimizer::State's names).
  absl::StatusOr<TensorMap> CurrentLora(const std::string& job_id, const std::string& config_hash,
                                        bool optimizer_state = false) ABSL_LOCKS_EXCLUDED(run_mu_);

  // The stage-local optimizer of data-parallel replicas (stage_runner_exchange.cc; StageService's JoinGroup, Reduce,
  // Update and LoadState). `caller_host`: the coordinator's address as this worker sees it (the store's host when
  // the request names none).
  absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const v1::JoinGroupRequest& req, const std::string& caller_host)
      ABSL_LOCKS_EXCLUDED(run_mu_);
  absl::StatusOr<v1::ReduceResponse> Reduce(const v1::ReduceRequest& req) ABSL_LOCKS_EXCLUDED(run_mu_);
  absl::StatusOr<v1::UpdateResponse> Update(const v1::UpdateRequest& req) ABSL_LOCKS_EXCLUDED(run_mu_);
  absl::Status LoadState(const ReceivedEnvelope& envelope) ABSL_LOCKS_EXCLUDED(run_mu_);
  std::string name() const;
  // This worker's metrics (bound to its job and stage at Configure); the RPC front end counts links with it.
  StageInstruments& metrics() { return metrics_; }
  // Our own address, known only once the server has bound its port.
  void set_address(const std::string& address) ABSL_LOCKS_EXCLUDED(address_mu_);

 private:
  struct MicroBatchState {
    TensorMap input;                                   // leaves; floating ones require grad after the first stage
    TensorMap constants;                               // the micro-batch's constants merged with its tables
    std::vector<TensorMap> checkpoints;                // with recompute: every block's input (the first is `input`)
    TensorMap output;                                  // kept only without recompute
    at::Tensor target;                                 // last stage
    at::Tensor loss_mask;                              // last stage, when the family masks the loss
    at::Tensor loss_weighting;                         // last stage, with the job's loss.weighting: [b]
    at::Tensor loss;                                   // last stage, without recompute
    std::map<std::string, std::vector<int64_t>> sent;  // shapes of the floating outputs sent (GRADIENT must match)
  };
  // One RunStep's working state.
  struct StepState {
    explicit StepState(at::Device device) : forward_spans(device), backward_spans(device) {}
    std::map<std::pair<int32_t, int32_t>, MicroBatchState> live;  // (chunk, micro-batch) between its F and B
    std::map<int32_t, TensorMap> constants;                       // per micro-batch, shared by the chunks
    std::map<int32_t, at::Tensor> outputs;                        // a forward-only pass's last-stage outputs
    std::map<int32_t, at::Tensor> losses;  // last stage: [] fp32 on the device per micro-batch, read once per step
    bool weights_loaded = false;
    DeviceSpans forward_spans, backward_spans;  // the device's own time in the actions (CUDA events)
  };

  absl::Status Forward(const v1::StepPlan& plan, int32_t chunk, int32_t mb, const std::function<bool()>& cancelled,
                       StepState& step, v1::StepSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  absl::Status Backward(const v1::StepPlan& plan, int32_t chunk, int32_t mb, const std::function<bool()>& cancelled,
                        StepState& step, v1::StepSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The stage's input for (chunk, mb): INPUTS on the first virtual stage, else the previous one's ACTIVATION.
  absl::StatusOr<TensorMap> AwaitInput(const v1::StepPlan& plan, int32_t chunk, int32_t mb,
                                       const std::function<bool()>& cancelled, v1::StepSummary& summary)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The micro-batch's constants (received once per step, kept for every chunk), with the cached RoPE tables.
  absl::StatusOr<TensorMap> Constants(const v1::StepPlan& plan, int32_t mb, const std::function<bool()>& cancelled,
                                      StepState& step, v1::StepSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_)
      ABSL_LOCKS_EXCLUDED(rope_mu_);
  // Waits for this step's adapter weights once, before the step's first computation.
  absl::Status EnsureWeights(const v1::StepPlan& plan, const std::function<bool()>& cancelled, StepState& step,
                             v1::StepSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The chunk forward: with a graph, or (recompute) without one, keeping the per-block checkpoints.
  TensorMap RunBlocks(int32_t chunk, MicroBatchState& state, const v1::StepPlan& plan, int32_t mb)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  absl::StatusOr<TensorMap> Await(const v1::StepPlan& plan, int32_t mb, v1::EnvelopeHeader::Kind kind,
                                  const std::function<bool()>& cancelled, v1::StepSummary& summary, int32_t chunk = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  v1::EnvelopeHeader Header(const v1::StepPlan& plan, int32_t mb, v1::EnvelopeHeader::Kind kind,
                            int32_t chunk = 0) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The receiver's chunk of chunk c's output (next virtual stage) and of its input gradient (previous one).
  int32_t NextChunk(int32_t c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) {
    return config_.stage_index() + 1 == config_.num_stages() ? c + 1 : c;
  }
  int32_t PrevChunk(int32_t c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) {
    return config_.stage_index() == 0 ? c - 1 : c;
  }
  // Queues `tensors` (device tensors) for `peer`: on CUDA their copy to host starts now on the side stream and
  // the sender's thread waits for it, so the compute stream goes straight on with the next action.
  void SendAsync(PeerSender& peer, v1::EnvelopeHeader header, const TensorMap& tensors);
  absl::StatusOr<v1::StepSummary> RunActions(const v1::StepPlan& plan, const std::function<bool()>& cancelled,
                                             const GradSink& sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // A forward-only pass (plan.pass() > 0): eval mode, no graph, the last stage's outputs to `sink`.
  absl::StatusOr<v1::StepSummary> RunPass(const v1::StepPlan& plan, const std::function<bool()>& cancelled,
                                          const GradSink& sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // Waits until the peer senders have shipped everything queued (in slices, so a cancel is noticed).
  absl::Status FlushPeers(const v1::StepPlan& plan, const std::function<bool()>& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  void FillByteCounts(v1::StepSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) ABSL_LOCKS_EXCLUDED(rope_mu_);
  // The step's losses (kept on the device) into the summary: one device → host copy per step, not per micro-batch.
  void FillLosses(StepState& step, v1::StepSummary& summary);
  // The step's device seconds (events) and memory: on CUDA the peaks since this runner's last step (allocated and
  // reserved; another pipeline on the worker does not cut the period short), on the CPU the resident set.
  void FillDeviceFigures(StepState& step, v1::StepSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // After a step on CUDA: the pinned host allocator's cache back to the system when over its budget.
  void TrimPinnedHost() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // Whether `req` is the configured request but for the neighbours, the generation and the run: the stage as built
  // (frozen weights and adapters) is then kept. Any other field (model, blocks, dtype, LoRA, seed, job...) rebuilds it.
  bool SameStage(const v1::ConfigureRequest& req) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // A Configure from another run (run_id) of the same stage: the adapters go back to their initial values
  // (ResetForNewRun); only the frozen weights survive.
  void ResetForNewRun() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) ABSL_LOCKS_EXCLUDED(rope_mu_);
  // `weights` (PEFT names, every adapter of every chunk, nothing else) into the chunks' adapters, gradients zeroed.
  absl::Status AssignAllLora(TensorMap weights) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // Block swap (req.offload_blocks > 0): the configured stage's first blocks go to host memory.
  absl::Status SwapBlocks(const v1::ConfigureRequest& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The peer connections for config_ (Configure).
  void ConnectPeers(WireDtype wire) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  v1::ConfigureResponse Response() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The step's progress with the pushes in flight to `next` and `prev` (either may be null).
  v1::StageHeartbeat Progress(const PeerSender* next, const PeerSender* prev) const;
  // All chunks' adapters by PEFT name (names are global block paths, so chunks never collide).
  std::map<std::string, at::Tensor> AllLora() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);

  StageRunnerOptions options_;  // fixed after construction (the address is address_)
  // Our own address for messages: set once the server has bound its port, while handlers may already name us (a
  // coordinator polls a fixed --listen port before LISTENING is printed).
  mutable absl::Mutex address_mu_;
  std::string address_ ABSL_GUARDED_BY(address_mu_);
  StageInstruments metrics_;
  // Held by Configure, RunStep and CurrentLora: one at a time uses or replaces the configured stage.
  absl::Mutex run_mu_;
  Inbox inbox_;
  ProgressBoard progress_;
  std::atomic<uint64_t> generation_{0};  // ConfigureRequest.generation; older envelopes are dropped
  std::atomic<int32_t> stage_index_{0};  // config_.stage_index(), for name() on Push handlers (without run_mu_)

  v1::ConfigureRequest config_ ABSL_GUARDED_BY(run_mu_);
  bool configured_ ABSL_GUARDED_BY(run_mu_) = false;
  std::shared_ptr<const ModelFamily> model_ ABSL_GUARDED_BY(run_mu_);         // the model's family, config and weights
  std::vector<std::unique_ptr<StageModel>> chunks_ ABSL_GUARDED_BY(run_mu_);  // [chunk]; one unless interleaved
  std::vector<StageRange> ranges_ ABSL_GUARDED_BY(run_mu_);                   // [chunk]
  at::ScalarType dtype_ ABSL_GUARDED_BY(run_mu_) = at::kFloat;
  at::Device device_ ABSL_GUARDED_BY(run_mu_) = at::Device(at::kCPU);
  // Host ↔ device copies (side streams + pinned memory on CUDA). Replaced by Configure; Deliver (Push handlers,
  // without run_mu_) uploads RoPE tables through a snapshot (Transfer()).
  absl::Mutex transfer_mu_;
  std::shared_ptr<DeviceTransfer> transfer_ ABSL_GUARDED_BY(transfer_mu_);
  std::shared_ptr<DeviceTransfer> Transfer() ABSL_LOCKS_EXCLUDED(transfer_mu_);
  std::atomic<bool> pinned_host_{false};  // read by Push handlers without run_mu_
  // What pushes and plans must match (null while unconfigured), and the step last run or running.
  mutable absl::Mutex expected_mu_;
  std::shared_ptr<const ExpectedStageIO> expected_ ABSL_GUARDED_BY(expected_mu_);
  std::atomic<int64_t> current_step_{-1};
  // The adapters as Configure initialized them (fp32, CPU, PEFT names): a new run on the same model starts from them,
  // exactly as a fresh worker would.
  std::map<std::string, at::Tensor> initial_lora_ ABSL_GUARDED_BY(run_mu_);
  // The configured stage's frozen tensors (per chunk) and their FrozenWeightsKey, read by other pipelines' Configure
  // without run_mu_ (which a step holds throughout).
  mutable absl::Mutex frozen_mu_;
  std::string frozen_key_ ABSL_GUARDED_BY(frozen_mu_);
  std::vector<FrozenTensors> frozen_ ABSL_GUARDED_BY(frozen_mu_);

  // A snapshot of expected_ with the current step; FAILED_PRECONDITION while unconfigured.
  absl::StatusOr<ExpectedStageIO> Expected() const ABSL_LOCKS_EXCLUDED(expected_mu_);
  // Builds expected_ from the configured job.
  void PublishExpected(int32_t micro_batches) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_) ABSL_LOCKS_EXCLUDED(expected_mu_);
  // Held gradients, the peer group and AdamW of a stage-local optimizer (empty unless the job's replicas use one).
  LocalOptimizer optimizer_ ABSL_GUARDED_BY(run_mu_);
  // Its adapters and state in host shared memory, when the coordinator asks for one (JoinGroupRequest.host_copy).
  HostStateCopy host_copy_ ABSL_GUARDED_BY(run_mu_);
  const StageTraceWindow trace_window_ = StageTraceWindow::FromEnvironment();
  // LoadState's work: `state` (adapters and optimizer state, checked against the stage) made the stage's.
  absl::Status LoadStateLocked(const TensorMap& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The host copy rewritten with the current adapters and state (a failure is logged, and ends the copies).
  void WriteHostCopy() ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The configured job's check for the exchange's requests (FAILED_PRECONDITION while unconfigured).
  absl::Status CheckExchangeJob(const std::string& job_id, const std::string& config_hash, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The senders to the neighbour stages the request names.
  std::unique_ptr<PeerSender> next_ ABSL_GUARDED_BY(run_mu_);
  std::unique_ptr<PeerSender> prev_ ABSL_GUARDED_BY(run_mu_);

  absl::Mutex rope_mu_;
  std::map<std::string, TensorMap> rope_ ABSL_GUARDED_BY(rope_mu_);  // key → the tables (bare names) on device
  std::deque<std::string> rope_order_ ABSL_GUARDED_BY(rope_mu_);     // FIFO eviction
  uint64_t bytes_received_ ABSL_GUARDED_BY(rope_mu_) = 0;
};

}  // namespace baton
