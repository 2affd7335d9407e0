#include "job_service/coordinator_command.h"

#include <absl/strings/str_split.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/expert_runs.h"
#include "coordinator/pipeline_trainer.h"
#include "coordinator/sweep_runs.h"
#include "core/device/device_memory.h"
#include "core/metrics/metrics_server.h"
#include "core/train/job.h"
#include "core/util/log.h"
#include "job_service/job_service.h"
#include "rpc/tls.h"
#include "rpc/tls_flags.h"
#include "stage_driver/driver_options.h"

namespace baton {
namespace {

// Installs the --tls_*/--insecure flags' security when any is given; when none is and `required`, the
// FailedPrecondition that says what to pass. The embedded default needs none: it makes its own
// (stage_driver/local_tls.h); servers we did not start (--workers, --listen's clients, an encoder worker) do.
absl::Status InstallCoordinatorSecurity(bool required) {
  const TlsFlagValues flags = TlsFlagsFromCommandLine();
  const bool given =
      flags.insecure || !flags.dir.empty() || !flags.ca.empty() || !flags.cert.empty() || !flags.key.empty();
  if (!given && !required) return absl::OkStatus();
  return InstallSecurityFromFlags("coordinator", /*warn_insecure=*/true).status();
}

int ServeJobs(const CoordinatorCommand& command, const CoordinatorOptions& base) {
  JobServiceOptions service;
  service.listen = command.listen;
  service.base = base;
  service.data_root = command.data_root;
  if (!command.token_file.empty()) {
    auto token = ReadTokenFile(command.token_file);
    if (!token.ok()) {
      std::fprintf(stderr, "coordinator: --token_file: %s\n", std::string(token.status().message()).c_str());
      return 2;
    }
    service.token = *token;
  }
  service.output_root = command.output_root;
  absl::Status status = RunJobService(
      service,
      [](const std::string& address) {
        std::printf("LISTENING %s\n", address.c_str());
        std::fflush(stdout);
      },
      command.stop);
  if (!status.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

int RunOneJob(const CoordinatorCommand& command, CoordinatorOptions options, bool metrics) {
  auto job = LoadJob(command.job);
  if (!job.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  options.hooks.stop = command.stop;
  absl::StatusOr<CoordinatorResult> result;
  if (job->sweep.empty()) {
    if (metrics) AddMetricsHooks(JobName(*job), &options.hooks);
    result = RunCoordinatorJob(*job, options);
  } else {  // each member's metrics under its own job label ("<job>.<member>")
    result = RunSweepJob(*job, options, [metrics](const SweepMember& member, CoordinatorOptions& o) {
      if (metrics) AddMetricsHooks(JobName(member.job), &o.hooks);
    });
  }
  const int sig = command.signal != nullptr ? command.signal->load() : 0;
  if (!result.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", result.status().ToString().c_str());
    return sig != 0 && absl::IsCancelled(result.status()) ? 128 + sig : 1;
  }
  const int64_t total_steps = options.steps > 0 ? options.steps : job->steps;
  if (sig != 0 && (result->steps.empty() || result->steps.back().step < total_steps)) {
    std::fprintf(stderr,
                 "coordinator: interrupted by %s after step %lld of %lld; checkpointed: continue with --resume\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM",
                 static_cast<long long>(result->steps.empty() ? result->first_step : result->steps.back().step),
                 static_cast<long long>(total_steps));
    return 128 + sig;
  }
  if (!result->steps.empty()) {
    // Two experts: each run wrote its own folder; the last one's steps are reported.
    const std::string dir = job->expert == "both" ? options.output_dir + "/{high_noise,low_noise}"
                            : !job->sweep.empty() ? options.output_dir + "/<member>"
                                                  : options.output_dir;
    std::printf("done: loss %.5f → %.5f over steps %lld..%lld; wrote %s/lora.safetensors and %s/train_log.jsonl\n",
                result->steps.front().loss, result->steps.back().loss,
                static_cast<long long>(result->steps.front().step), static_cast<long long>(result->steps.back().step),
                dir.c_str(), dir.c_str());
  }
  return 0;
}

}  // namespace

int RunCoordinatorCommand(const CoordinatorCommand& command) {
  SetLogTag("coordinator");
  // First: a bad --metrics fails before any work, and Prometheus sees the process while it loads.
  // Its `metrics: coordinator H:P, stage 0 H:P, ...` line comes once the stage workers are known.
  auto metrics = StartMetricsServerFromFlag(command.metrics, "coordinator", /*print=*/false, RefreshDeviceMemoryGauges);
  if (!metrics.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(metrics.status().message()).c_str());
    return 2;
  }
  const std::unique_ptr<MetricsServer> metrics_server = std::move(*metrics);  // null without --metrics
  // Transport security: the embedded default needs no flags; servers we did not start do.
  absl::Status security = InstallCoordinatorSecurity(!command.workers.empty() || !command.listen.empty());
  if (!security.ok()) {
    std::fprintf(stderr, "%s\n", std::string(security.message()).c_str());
    return 2;
  }
  CoordinatorOptions options = command.options;
  if (!command.workers.empty()) {
    auto groups = ParseWorkerGroups(command.workers);
    const absl::Status workers = groups.ok() ? ApplyWorkerGroups(*groups, options) : groups.status();
    if (!workers.ok()) {
      std::fprintf(stderr, "coordinator: %s\n", std::string(workers.message()).c_str());
      return 2;
    }
  }
  if (metrics_server) {
    options.metrics_listen = command.metrics;
    options.metrics_address = metrics_server->address();
  }
  if (!command.listen.empty()) {
    if (!command.job.empty()) {
      std::fprintf(stderr, "coordinator: --job and --listen exclude each other (submit jobs with baton submit)\n");
      return 2;
    }
    return ServeJobs(command, options);
  }
  if (command.job.empty()) {
    std::fprintf(stderr, "coordinator: --job (one job) or --listen (the job service) is required\n");
    return 2;
  }
  return RunOneJob(command, std::move(options), metrics_server != nullptr);
}

}  // namespace baton
