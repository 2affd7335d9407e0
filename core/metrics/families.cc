#include "core/metrics/families.h"

#include "core/metrics/version.h"  // generated: BATON_VERSION

namespace baton {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Histogram::BucketBoundaries Exponential(double start, double factor, int count) {
  prometheus::Histogram::BucketBoundaries out;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

}  // namespace

std::shared_ptr<prometheus::Registry> MetricsRegistry() {
  static auto* registry = new std::shared_ptr<prometheus::Registry>(std::make_shared<prometheus::Registry>());
  return *registry;
}

ProcessMetrics& ProcessFamilies() {
  static ProcessMetrics* m = [] {
    prometheus::Registry& r = *MetricsRegistry();
    return new ProcessMetrics{
        BuildCounter()
            .Name("baton_rpc_errors_total")
            .Help("gRPC calls that ended with a status other than OK, by side (server: calls this process served; "
                  "client: calls it made), method and status code")
            .Register(r),
        BuildGauge()
            .Name("baton_process_resident_memory_bytes")
            .Help("Resident set size of this process (/proc/self/statm), read at scrape time")
            .Register(r),
        BuildGauge()
            .Name("baton_device_memory_allocated_bytes")
            .Help("CUDA memory allocated by libtorch's caching allocator on each device this process computes on")
            .Register(r),
        BuildGauge()
            .Name("baton_pinned_host_memory_bytes")
            .Help("Page-locked host memory held by libtorch's pinned allocator (CUDA processes), by state: in_use "
                  "(live tensors) or cached (freed blocks kept for reuse; trimmed after each step over the budget)")
            .Register(r),
        BuildCounter()
            .Name("baton_metrics_refresh_errors_total")
            .Help("Scrape-time refreshes of the process gauges that failed (the scrape still answers)")
            .Register(r),
        BuildGauge()
            .Name("baton_build_info")
            .Help("Always 1; labels name the process role and the Baton version")
            .Register(r),
    };
  }();
  return *m;
}

CoordinatorMetrics& CoordinatorFamilies() {
  static CoordinatorMetrics* m = [] {
    prometheus::Registry& r = *MetricsRegistry();
    return new CoordinatorMetrics{
        BuildCounter().Name("baton_steps_completed_total").Help("Optimizer steps completed by this run").Register(r),
        BuildGauge().Name("baton_step").Help("The last completed optimizer step").Register(r),
        BuildGauge().Name("baton_steps_target").Help("The step the run ends at").Register(r),
        BuildHistogram()
            .Name("baton_step_duration_seconds")
            .Help("Wall-clock seconds per optimizer step, as the coordinator sees it")
            .Register(r),
        BuildGauge().Name("baton_loss").Help("Mean flow-matching loss of the last step").Register(r),
        BuildGauge().Name("baton_learning_rate").Help("Learning rate of the last step").Register(r),
        BuildGauge()
            .Name("baton_gradient_norm")
            .Help("Global LoRA gradient norm of the last step, before clipping")
            .Register(r),
        BuildGauge().Name("baton_samples_per_second").Help("Training samples per second in the last step").Register(r),
        BuildHistogram()
            .Name("baton_checkpoint_duration_seconds")
            .Help("Seconds to write a checkpoint and the LoRA outputs")
            .Register(r),
        BuildGauge()
            .Name("baton_checkpoint_last_success_timestamp_seconds")
            .Help("Unix time of the last checkpoint written")
            .Register(r),
        BuildGauge()
            .Name("baton_stage_up")
            .Help("1 while the coordinator's last call to the stage worker succeeded, else 0")
            .Register(r),
        BuildCounter()
            .Name("baton_step_retries_total")
            .Help("Steps redone after a stage worker was lost or stalled, by the stage blamed")
            .Register(r),
        BuildGauge()
            .Name("baton_validation_loss")
            .Help("Validation loss at the last validation, per timestep and their mean (timestep=\"mean\")")
            .Register(r),
        BuildGauge()
            .Name("baton_sample_seconds")
            .Help("Seconds per sample image at the last rendering (denoising, decoding, writing)")
            .Register(r),
        BuildCounter().Name("baton_sample_images_total").Help("Sample images written by this run").Register(r),
        BuildGauge()
            .Name("baton_replica_micro_batches")
            .Help("Micro-batches each data-parallel replica ran in the last step (its share of the split)")
            .Register(r),
        BuildGauge()
            .Name("baton_replica_samples_per_second")
            .Help("Each replica's samples in the last step over the seconds it took to run them")
            .Register(r),
        BuildGauge()
            .Name("baton_replica_allreduce_seconds")
            .Help("replica_exchange: allreduce: the slowest stage's allreduce of the last step's LoRA gradients")
            .Register(r),
        BuildGauge()
            .Name("baton_replica_exchange_wait_seconds")
            .Help("replica_exchange: allreduce: the coordinator's wait after the last step's micro-batches for the "
                  "stages' sums and updates")
            .Register(r),
        BuildGauge()
            .Name("baton_stage_unreachable_seconds")
            .Help("Seconds since the stage worker last answered, while it does not (from half the stall timeout on); "
                  "0 once it is back")
            .Register(r),
    };
  }();
  return *m;
}

StageMetrics& StageFamilies() {
  static StageMetrics* m = [] {
    prometheus::Registry& r = *MetricsRegistry();
    return new StageMetrics{
        BuildCounter()
            .Name("baton_stage_forward_seconds_total")
            .Help("Seconds this stage spent in forward actions")
            .Register(r),
        BuildCounter()
            .Name("baton_stage_backward_seconds_total")
            .Help("Seconds this stage spent in backward actions, recomputation included")
            .Register(r),
        BuildCounter()
            .Name("baton_stage_idle_seconds_total")
            .Help("Seconds this stage spent inside steps waiting for data from other processes")
            .Register(r),
        BuildGauge()
            .Name("baton_microbatches_in_flight")
            .Help("Micro-batches (per model chunk) forwarded and not yet backpropagated on this stage")
            .Register(r),
        BuildGauge()
            .Name("baton_worker_configured")
            .Help("1 while this worker is configured for the job and stage in its labels")
            .Register(r),
        BuildCounter()
            .Name("baton_link_sent_bytes_total")
            .Help("Tensor payload bytes this stage sent to the peer")
            .Register(r),
        BuildCounter()
            .Name("baton_link_received_bytes_total")
            .Help("Tensor payload bytes this stage received from the peer")
            .Register(r),
        BuildCounter()
            .Name("baton_link_transfer_seconds_total")
            .Help("Seconds this stage spent sending to or receiving from the peer")
            .Register(r),
        BuildGauge()
            .Name("baton_link_queued_bytes")
            .Help("Bytes queued for the peer and not yet sent (bounded by --send_queue_bytes)")
            .Register(r),
    };
  }();
  return *m;
}

EncoderMetrics& EncoderFamilies() {
  static EncoderMetrics* m = [] {
    prometheus::Registry& r = *MetricsRegistry();
    return new EncoderMetrics{
        BuildCounter().Name("baton_encoder_samples_encoded_total").Help("Samples encoded into the cache").Register(r),
        BuildCounter()
            .Name("baton_encoder_samples_kept_total")
            .Help("Samples reused unchanged from the existing cache")
            .Register(r),
        BuildCounter()
            .Name("baton_encoder_samples_failed_total")
            .Help("Samples that could not be read or encoded")
            .Register(r),
        BuildHistogram()
            .Name("baton_encoder_sample_seconds")
            .Help("Seconds to encode one sample (image and caption)")
            .Register(r),
    };
  }();
  return *m;
}

prometheus::Histogram::BucketBoundaries StepDurationBuckets() { return Exponential(0.01, 2, 17); }
prometheus::Histogram::BucketBoundaries CheckpointDurationBuckets() { return Exponential(0.01, 2, 17); }
prometheus::Histogram::BucketBoundaries EncoderSampleBuckets() { return Exponential(0.001, 2, 17); }

std::string BatonVersion() { return BATON_VERSION; }

void SetBuildInfo(const std::string& process) {
  ProcessFamilies().build_info.Add({{"process", process}, {"version", BatonVersion()}}).Set(1);
}

void CountRpcError(const std::string& side, const std::string& method, const std::string& code) {
  ProcessFamilies().rpc_errors.Add({{"side", side}, {"method", method}, {"code", code}}).Increment();
}

}  // namespace baton
