// coordinator: trains a LoRA with the transformer split over --stages stage workers.
// Without --workers it starts the stage workers itself on loopback and stops them on exit.
#include <absl/flags/flag.h>
#include <absl/flags/parse.h>
#include <absl/flags/usage.h>
#include <absl/strings/str_split.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/pipeline_trainer.h"
#include "core/device/device.h"
#include "core/metrics/metrics_server.h"
#include "core/util/log.h"

ABSL_FLAG(int, stages, 2, "number of pipeline stages");
ABSL_FLAG(std::string, job, "", "job YAML file (required)");
ABSL_FLAG(std::string, workers, "",
          "comma-separated host:port of running stage workers, one per stage "
          "(default: start them locally on loopback)");
ABSL_FLAG(int64_t, steps, 0, "override the job's step count");
ABSL_FLAG(std::string, output, "out/run", "output folder: lora.safetensors, train_log.jsonl, checkpoints/");
ABSL_FLAG(bool, resume, false, "continue from the newest complete checkpoint in --output");
ABSL_FLAG(int, rpc_timeout_s, 300, "deadline of every RPC, including a whole step");
ABSL_FLAG(int, connect_timeout_s, 20, "how long to wait for a stage worker to answer at all");
ABSL_FLAG(std::string, stage_worker, "", "stage_worker binary for local workers (default: next to coordinator)");
ABSL_FLAG(std::string, metrics, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free one); local stage workers "
          "serve theirs on HOST:PORT+1+i (free ports when PORT is 0); empty = no metrics");

namespace {
void OnSignal(int) { baton::RequestCoordinatorStop(); }
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "coordinator --stages N --job JOB.yaml [--workers host:port,...] [--steps K] [--output DIR] [--resume] "
      "[--metrics HOST:PORT]");
  baton::InstallVersionFlag();
  absl::ParseCommandLine(argc, argv);
  baton::SetLogTag("coordinator");
  // First: a bad --metrics fails before any work, and Prometheus sees the process while it loads.
  // Its `metrics: coordinator H:P, stage 0 H:P, ...` line comes once the stage workers are known.
  auto metrics = baton::StartMetricsServerFromFlag(absl::GetFlag(FLAGS_metrics), "coordinator", /*print=*/false);
  if (!metrics.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(metrics.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_job).empty()) {
    std::fprintf(stderr, "coordinator: --job is required\n");
    return 2;
  }
  auto job = baton::LoadJob(absl::GetFlag(FLAGS_job));
  if (!job.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  baton::CoordinatorOptions options;
  options.stages = absl::GetFlag(FLAGS_stages);
  std::string workers = absl::GetFlag(FLAGS_workers);
  if (!workers.empty()) options.workers = absl::StrSplit(workers, ',', absl::SkipWhitespace());
  options.steps = absl::GetFlag(FLAGS_steps);
  options.output_dir = absl::GetFlag(FLAGS_output);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  options.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  options.stage_worker_binary = absl::GetFlag(FLAGS_stage_worker);
  if (*metrics) {
    options.metrics_listen = absl::GetFlag(FLAGS_metrics);
    options.metrics_address = (*metrics)->address();
    baton::AddMetricsHooks(baton::JobName(*job), &options.hooks);
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  auto result = baton::RunCoordinator(*job, options);
  if (!result.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", result.status().ToString().c_str());
    return 1;
  }
  if (!result->steps.empty()) {
    std::printf("done: loss %.5f → %.5f over steps %lld..%lld; wrote %s/lora.safetensors and %s/train_log.jsonl\n",
                result->steps.front().loss, result->steps.back().loss,
                static_cast<long long>(result->steps.front().step), static_cast<long long>(result->steps.back().step),
                options.output_dir.c_str(), options.output_dir.c_str());
  }
  return 0;
}
