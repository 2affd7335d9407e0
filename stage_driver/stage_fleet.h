// The stages of a pipeline, as the driver talks to them: their clients, which LoRA parameters each holds, what each
// has in its RoPE cache, and the plans they follow; StageFleet::RunStep drives one attempt of a step over them.
#pragma once

#include <absl/status/status.h>
#include <absl/time/time.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "baton/v1/stage.pb.h"
#include "core/model/model_family.h"
#include "core/pipeline/schedule.h"
#include "core/train/batches.h"
#include "stage_driver/call_pool.h"
#include "stage_driver/outage_watch.h"
#include "stage_driver/pipeline_spec.h"
#include "stage_driver/stage_client.h"

namespace baton {

// Runs fn(i) for i in [0, n) on n threads; returns the first error (by index).
absl::Status ParallelFor(int n, const std::function<absl::Status(int)>& fn);

// What the driver knows a stage holds in its RoPE cache (mirrors the stage's FIFO).
class RopeMirror {
 public:
  bool Has(const std::string& key) const { return keys_.count(key) > 0; }
  void Add(const std::string& key);

 private:
  std::set<std::string> keys_;
  std::deque<std::string> order_;
};

// A step's inputs: its micro-batches and their shell outputs (stage-0 inputs, constants, tables and their keys).
struct StepInputs {
  std::vector<MicroBatch> micro_batches;
  std::vector<ShellOutputs> shell;  // [micro-batch]
};

// What the stages return from one step.
struct StepOutputs {
  std::vector<TensorMap> grads;            // [stage] summed LoRA gradients by PEFT name
  std::vector<v1::StepSummary> summaries;  // [stage]; the last one's losses: every micro-batch's, in step order
  std::vector<int> replica_micro_batches;  // with replicas (ReplicaSet): how many micro-batches each ran
  std::vector<double> replica_seconds;     // and the seconds each spent running them
};

// Why a step failed, as far as the stall watch knows: the stage it blames (-1: none, or a link).
struct StallVerdict {
  int stage = -1;
  std::string message;
};

// What one run of a step's micro-batches over the stages is: the schedule over them, where they start in the step, and
// what the stages do with their gradients. A whole step, or a replica's share of one.
struct StepSlice {
  Schedule schedule;          // over the slice's micro-batches
  int first_micro_batch = 0;  // the step-wide index of the slice's micro-batch 0 (dropout seeds)
  v1::StepPlan::Gradients gradients = v1::StepPlan::STREAM;  // stream them back, or hold them (a stage-local AdamW)
  bool reduce_when_held = false;  // StepPlan.reduce_when_held: the peer groups are this step's
};

// A run's identity towards its workers (ConfigureRequest.run_id): random, new for every run (a second
// run of the same job and a --resume included), so a worker that outlived an earlier run resets for this one.
std::string NewRunId();
// The first recovery generation of a run: the wall clock in microseconds, so every envelope of an earlier run
// against the same workers (its generations started earlier and rose by one per recovery) is older and dropped.
uint64_t RunStartGeneration();

// What a fleet runs every step and pass with, fixed for the run.
struct FleetSettings {
  std::string job_id;  // the pipeline's id, what the stages know the run by (StagePipeline: its spec's)
  // A stage silent this long, or a push in flight this long, fails the step as stalled (the stages send a
  // heartbeat every second).
  absl::Duration stall_timeout = absl::Seconds(15);
  int chunks = 1;             // model chunks per worker (interleaved: v; a pass runs each through every one)
  float loss_scale = 1.0f;    // 1/m, m the step's micro-batches over all replicas
  uint64_t dropout_seed = 0;  // the job's LoRA dropout base seed
  // A stage-local optimizer (PeerExchange): the stages keep their own adapters (no LORA_WEIGHTS pushed) and hold the
  // step's gradients (HOLD_NEW, or HOLD_ADD for a second slice of the same step) instead of streaming them.
  bool own_adapters = false;
  OnOutage on_outage;  // every report of a stage that does not answer (optional)
};

// The stages of one pipeline as the driver talks to them: their clients, the LoRA parameters each holds, what each
// has in its RoPE cache, the run's identity and generation, and the stall watch. A StagePipeline owns one; its
// StageSet connects and configures it.
//
// RunStep feeds each stage, per micro-batch, the RoPE tables it lacks, then its current adapters, and the
// constants, the inputs (stage 0) and the target (last stage) unless PushData already sent those; runs every
// stage's action list at once; and gathers each stage's summed LoRA gradients and step summary. The first failing
// stage cancels the others, and the error names the root cause.
//
// Step boundary overlap: the trainer calls PushData for step n+1 while step n runs, so at the boundary only the
// new adapters (and any new RoPE table) travel; the stages wait for their adapters only right before their first
// computation, so stage s > 0 receives its weights while the stages before it compute their first forwards.
// RoPE tables never travel early: a new one could evict from a stage's FIFO cache a table step n still uses.
//
// Not thread-safe as a whole: one step, pass or configuration at a time (its owner orders them); PushData may run
// beside a step, and Traffic, OldestPushSeconds and CancelAll from any thread while the clients stand.
class StageFleet {
 public:
  // `first_worker`: stage 0's global worker index and `outage_prefix` ("replica 1: "), for the outage reports.
  explicit StageFleet(FleetSettings settings, int first_worker = 0, std::string outage_prefix = "");

  const FleetSettings& settings() const { return settings_; }
  const std::string& job_id() const { return settings_.job_id; }
  const std::string& run_id() const { return run_id_; }
  uint64_t generation() const { return generation_; }  // ConfigureRequest.generation
  void NewGeneration() { ++generation_; }              // a Configure follows: the stages drop what came before
  int size() const { return static_cast<int>(clients_.size()); }
  StageClient& client(int stage) { return *clients_[stage]; }
  std::string name(int stage) const;                                                  // "stage 1 (host:port)"
  const std::vector<std::string>& params(int stage) const { return params_[stage]; }  // its LoRA parameter names
  OutageWatch& outages() { return outages_; }
  const StallVerdict& last_stall() const { return last_stall_; }  // set when RunStep failed on a stall
  RopeMirror& rope(int stage) { return rope_[stage]; }

  // The StageSet's: fresh clients (every one counts into the fleet's traffic); then, after a Configure, what each
  // stage holds (a Configure empties their RoPE caches).
  void Connect(std::vector<std::unique_ptr<StageClient>> clients);
  void Configured(std::vector<std::vector<std::string>> params);

  // `slice` of step `step` (0-based) over every stage, with the adapters in `master` and the slice's `inputs`;
  // `feed_data`: the constants, inputs and targets go with it (false: PushData sent them already).
  absl::StatusOr<StepOutputs> RunStep(int64_t step, const StepSlice& slice, const StepInputs& inputs,
                                      const std::map<std::string, at::Tensor>& master, bool feed_data = true);
  // Pushes the step's constants (every stage), inputs (stage 0) and targets (last stage) -- no RoPE tables, no
  // weights -- to every stage at once; safe while another step runs (the stages key their inbox by step).
  absl::Status PushData(int64_t step, const StepInputs& inputs);
  // A forward-only pass (validation, sample images) between training steps: every stage gets the RoPE tables it
  // lacks, the adapters in `master`, each micro-batch's constants (and stage 0 its inputs), all tagged with `pass` so
  // they never mix with a step's; returns the last stage's output per micro-batch (fp32). At most the configured
  // micro-batches; `step` is the training step it follows (messages).
  absl::StatusOr<std::vector<at::Tensor>> RunForwardPass(int64_t step, uint64_t pass,
                                                         const std::vector<ShellOutputs>& shell,
                                                         const std::map<std::string, at::Tensor>& master);
  // call(client, stage) for every stage at once, for calls that send no heartbeats (the stage-local optimizer's
  // JoinGroup, Reduce, Update, a GetLora or LoadState), on the fleet's call pool: a stage whose call has not returned
  // after half the stall timeout is said as the stage's outage (`doing`: what waits for it), as a silent step is.
  // Each stage's status.
  std::vector<absl::Status> CallEach(const std::string& doing,
                                     const std::function<absl::Status(StageClient&, int stage)>& call);

  // The bytes exchanged with every stage so far (clients replaced or not); the oldest push in flight, in seconds;
  // Cancel on every client (a step re-arms them).
  TrafficBytes Traffic() const;
  double OldestPushSeconds() const;
  void CancelAll();

 private:
  v1::EnvelopeHeader Header(int64_t step, int micro_batch, v1::EnvelopeHeader::Kind kind, uint64_t pass = 0) const;
  // Feeds every stage (feed(i)) and runs plan_for(i) on each, all at once, with the stall watch; each stage's streamed
  // tensors go to (*streamed)[i]. The first failure cancels the rest; the error names the root cause and `what`.
  absl::Status RunOnStages(const std::string& what, const std::function<absl::Status(int)>& feed,
                           const std::function<v1::StepPlan(int)>& plan_for, std::vector<TensorMap>* streamed,
                           std::vector<v1::StepSummary>* summaries);
  // What stage `stage` is sent before a step or pass (`pass` 0: a step) runs: the RoPE tables it lacks, then (unless
  // !adapters: it owns them) its adapters from `master`.
  absl::Status PushTablesAndAdapters(int stage, int64_t step, uint64_t pass, const std::vector<ShellOutputs>& shell,
                                     const std::map<std::string, at::Tensor>& master, bool adapters);
  // Each micro-batch's constants, inputs (stage 0) and, when `targets` are given, targets (last stage).
  absl::Status PushStageData(int stage, int64_t step, uint64_t pass, const std::vector<ShellOutputs>& shell,
                             const std::vector<MicroBatch>* targets);
  // A plan's addressing: the pipeline, the step, the pass (0: a training step), the micro-batches.
  v1::StepPlan PlanHead(int64_t step, uint64_t pass, int micro_batches) const;
  v1::StepPlan PassPlan(int64_t step, uint64_t pass, int micro_batches) const;
  v1::StepPlan Plan(int stage, int64_t step, const StepSlice& slice) const;
  // The stall, if any stage or link has made no progress for stall_timeout. `fed`: [stage] the driver has sent it
  // everything of this step or pass.
  std::optional<StallVerdict> FindStall(const std::vector<std::atomic<bool>>& fed) const;
  // Stages silent for half the stall timeout and longer are reported to `outages` (`what`: "step 12"), and those
  // that talk again end their outage.
  void ReportSilence(const std::string& what);

  const FleetSettings settings_;
  const std::string run_id_ = NewRunId();
  uint64_t generation_ = RunStartGeneration();  // raised by each recovery and reconfiguration
  StallVerdict last_stall_;
  OutageWatch outages_;                                // stages silent in a step, pass or call, and their recovery
  std::vector<std::unique_ptr<StageClient>> clients_;  // [stage]
  std::shared_ptr<LinkTraffic> traffic_ = std::make_shared<LinkTraffic>();  // every client's bytes, replaced or not
  std::vector<std::vector<std::string>> params_;                            // [stage] LoRA parameter names it holds
  std::vector<RopeMirror> rope_;                                            // [stage]
  CallPool calls_;
};

}  // namespace baton
