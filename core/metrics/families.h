// Every Baton metric family, declared in this one file (Triton's habit): names `baton_<thing>_<unit>` in base
// units (seconds, bytes), counters ending in `_total`. Families live on one process-wide prometheus::Registry
// and are registered the first time a role asks for them, so a process exposes its own role's families plus
// ProcessFamilies(). Labels: job (the job's name), stage (0-based index), peer ("stage<N>" or "coordinator").
// Thread-safe: the accessors, Family::Add and every counter/gauge/histogram update.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

namespace baton {

// The registry every family below is on; the metrics server exposes it.
std::shared_ptr<prometheus::Registry> MetricsRegistry();

// Every process.
struct ProcessMetrics {
  prometheus::Family<prometheus::Counter>& rpc_errors;             // {side, method, code}
  prometheus::Family<prometheus::Gauge>& resident_memory_bytes;    // {}; refreshed at scrape time
  prometheus::Family<prometheus::Gauge>& device_memory_allocated;  // {device}; CUDA only, refreshed at scrape time
  prometheus::Family<prometheus::Gauge>& pinned_host_memory;       // {state: in_use | cached}; CUDA only, at scrape
  prometheus::Family<prometheus::Counter>& refresh_errors;         // {}; scrape-time refreshes that failed
  prometheus::Family<prometheus::Gauge>& build_info;               // {process, version} = 1
};
ProcessMetrics& ProcessFamilies();

// The coordinator (label job on all; stage_up also stage and peer = the worker's address).
struct CoordinatorMetrics {
  prometheus::Family<prometheus::Counter>& steps_completed;
  prometheus::Family<prometheus::Gauge>& step;          // last completed step
  prometheus::Family<prometheus::Gauge>& steps_target;  // the step the run ends at
  prometheus::Family<prometheus::Histogram>& step_duration_seconds;
  prometheus::Family<prometheus::Gauge>& loss;
  prometheus::Family<prometheus::Gauge>& learning_rate;
  prometheus::Family<prometheus::Gauge>& gradient_norm;
  prometheus::Family<prometheus::Gauge>& samples_per_second;
  prometheus::Family<prometheus::Histogram>& checkpoint_duration_seconds;
  prometheus::Family<prometheus::Gauge>& checkpoint_last_success_timestamp_seconds;
  prometheus::Family<prometheus::Gauge>& stage_up;               // {job, stage, peer}
  prometheus::Family<prometheus::Counter>& step_retries;         // {job, stage}; stage "none" when no stage was blamed
  prometheus::Family<prometheus::Gauge>& validation_loss;        // {job, timestep}; timestep "mean" over them
  prometheus::Family<prometheus::Gauge>& sample_seconds;         // {job}: seconds per sample image, last rendering
  prometheus::Family<prometheus::Counter>& sample_images;        // {job}
  prometheus::Family<prometheus::Gauge>& replica_micro_batches;  // {job, replica}: its share of the last step
  prometheus::Family<prometheus::Gauge>& replica_samples_per_second;  // {job, replica}: its samples / its seconds
  // {job}, with replica_exchange: allreduce: the slowest stage's allreduce of the last step, and the coordinator's
  // wait after the step's micro-batches (what the sums did not hide, plus the stages' AdamW).
  prometheus::Family<prometheus::Gauge>& replica_allreduce_seconds;
  prometheus::Family<prometheus::Gauge>& replica_exchange_wait_seconds;
  // {job, stage}: seconds since the stage worker last answered while it does not (a dead link, a stopped host), from
  // half the stall timeout on; 0 once it is back. Stage: the global worker index (replica after replica).
  prometheus::Family<prometheus::Gauge>& stage_unreachable_seconds;
};
CoordinatorMetrics& CoordinatorFamilies();

// A stage worker (labels job, stage and replica; the link families also peer).
struct StageMetrics {
  prometheus::Family<prometheus::Counter>& forward_seconds;
  prometheus::Family<prometheus::Counter>& backward_seconds;
  prometheus::Family<prometheus::Counter>& idle_seconds;
  prometheus::Family<prometheus::Gauge>& microbatches_in_flight;
  prometheus::Family<prometheus::Gauge>& worker_configured;  // 1 once configured for {job, stage}
  prometheus::Family<prometheus::Counter>& link_sent_bytes;
  prometheus::Family<prometheus::Counter>& link_received_bytes;
  prometheus::Family<prometheus::Counter>& link_transfer_seconds;
  prometheus::Family<prometheus::Gauge>& link_queued_bytes;  // {job, stage, peer}: waiting in the peer sender's queue
};
StageMetrics& StageFamilies();

// An encoder worker (batch mode and --listen).
struct EncoderMetrics {
  prometheus::Family<prometheus::Counter>& samples_encoded;
  prometheus::Family<prometheus::Counter>& samples_kept;  // unchanged since the cache was built: reused
  prometheus::Family<prometheus::Counter>& samples_failed;
  prometheus::Family<prometheus::Histogram>& sample_seconds;
};
EncoderMetrics& EncoderFamilies();

// Histogram buckets (seconds).
prometheus::Histogram::BucketBoundaries StepDurationBuckets();        // 10 ms .. ~10 min
prometheus::Histogram::BucketBoundaries CheckpointDurationBuckets();  // 10 ms .. ~10 min
prometheus::Histogram::BucketBoundaries EncoderSampleBuckets();       // 1 ms .. ~1 min

// baton_build_info{process, version} = 1. `process`: "coordinator", "stage_worker", "encoder_worker".
void SetBuildInfo(const std::string& process);
// The version baton_build_info reports (git describe at configure time, or "unknown").
std::string BatonVersion();

// baton_rpc_errors_total{side, method, code} += 1. side: "server" | "client"; method e.g. "StageService/Push";
// code: the gRPC code's name, e.g. "UNAVAILABLE".
void CountRpcError(const std::string& side, const std::string& method, const std::string& code);

}  // namespace baton
