#include "encoder_worker/encoder_worker_command.h"

#include <absl/strings/str_cat.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "core/data/cache_merge.h"
#include "core/data/cache_shard.h"
#include "core/device/device_memory.h"
#include "core/device/threads.h"
#include "core/encode/flux2_encoder.h"
#include "core/encode/wan_encoder.h"
#include "core/metrics/metrics_server.h"
#include "core/train/common.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "encoder_worker/cache_builder.h"
#include "encoder_worker/encoder_service.h"
#include "rpc/tls_flags.h"

namespace baton {
namespace {

// The model family from the folder: a Wan pipeline (model_index.json / transformer config) or FLUX.2.
absl::StatusOr<std::unique_ptr<SampleEncoder>> OpenEncoder(const EncoderWorkerCommand& command, at::ScalarType dtype,
                                                           WeightQuant quantize) {
  if (IsWanPipelineFolder(command.model)) {
    WanEncoderOptions options;
    options.dtype = dtype;
    options.text_quantize = quantize;
    options.max_sequence_length = command.max_sequence_length;
    options.conditioning = command.conditioning;
    auto e = WanSampleEncoder::Open(command.model, options);
    if (!e.ok()) return e.status();
    return std::unique_ptr<SampleEncoder>(std::move(*e));
  }
  if (command.conditioning != "auto" && command.conditioning != "none") {
    return absl::InvalidArgumentError(absl::StrCat("--conditioning ", command.conditioning,
                                                   ": image-to-video conditioning is for Wan pipelines, ",
                                                   command.model, " is FLUX.2"));
  }
  Flux2EncoderOptions options;
  options.dtype = dtype;
  options.text_quantize = quantize;
  options.max_sequence_length = command.max_sequence_length;
  auto e = Flux2SampleEncoder::Open(command.model, options);
  if (!e.ok()) return e.status();
  return std::unique_ptr<SampleEncoder>(std::move(*e));
}

// Batch mode: one dataset into the cache, with a progress line, then a summary.
int BuildOneCache(const EncoderWorkerCommand& command, SampleEncoder& encoder, std::optional<ShardSpec> shard,
                  const std::vector<int64_t>& resolutions, const std::vector<int64_t>& frame_buckets) {
  CacheBuildOptions build;
  build.dataset_dir = command.dataset;
  build.cache_dir = command.cache;
  build.trigger = command.trigger;
  build.buckets = BucketsForResolution(resolutions.front());
  build.resolutions = resolutions;
  build.video.max_frames = command.max_frames;
  build.video.stride = command.frame_stride;
  build.video.frame_buckets = frame_buckets;
  build.extraction = {command.frame_extraction, command.clips_per_video, command.slide_stride};
  build.shard = shard;
  build.follow_links_into = command.follow_links_into;
  build.control_dir = command.control;
  const bool tty = ::isatty(STDOUT_FILENO);
  auto report = BuildCache(encoder, build, [&](const CacheBuildProgress& p) {
    std::printf("%s%s%s", tty ? "\r\033[K" : "", RenderEncodeProgress(p, 0).c_str(), tty ? "" : "\n");
    std::fflush(stdout);
  });
  if (tty) std::printf("\n");
  if (!report.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", report.status().ToString().c_str());
    return 1;
  }
  for (const auto& e : report->errors) std::fprintf(stderr, "error: %s\n", std::string(e.status.message()).c_str());
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  const std::string share = shard ? absl::StrCat(" (shard ", shard->ToString(), ")") : "";
  std::printf(
      "encoded %lld, kept %lld unchanged, %zu failed of %lld samples%s in %.1f s (%.3f s per encoded sample, "
      "peak RSS %.0f MiB); cache: %s\n",
      static_cast<long long>(report->encoded), static_cast<long long>(report->kept), report->errors.size(),
      static_cast<long long>(report->samples + report->unreadable), share.c_str(), report->seconds,
      report->seconds_per_encoded_sample, usage.ru_maxrss / 1024.0, build.cache_dir.c_str());
  return report->errors.empty() ? 0 : 1;
}

// --merge: the shard caches into --cache, then a summary.
int MergeCaches(const EncoderWorkerCommand& command) {
  if (command.cache.empty() || !command.dataset.empty() || !command.listen.empty() || !command.shard.empty()) {
    std::fprintf(stderr,
                 "encoder_worker: --merge SHARD_DIR,... needs --cache (the merged cache to write) and takes no "
                 "--dataset, --listen or --shard\n");
    return 2;
  }
  auto report = MergeShardCaches(command.merge, command.cache);
  if (!report.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "merged %lld records from %lld shards in %.1f s (%lld linked, %lld copied, %lld unchanged, %lld removed); "
      "cache: %s\n",
      static_cast<long long>(report->records), static_cast<long long>(report->shards), report->seconds,
      static_cast<long long>(report->linked), static_cast<long long>(report->copied),
      static_cast<long long>(report->unchanged), static_cast<long long>(report->removed), command.cache.c_str());
  return 0;
}

}  // namespace

int RunEncoderWorkerCommand(const EncoderWorkerCommand& command) {
  SetLogTag("encoder_worker");
  if (!command.merge.empty()) return MergeCaches(command);
  std::optional<ShardSpec> shard;
  if (!command.shard.empty()) {
    auto parsed = ParseShard(command.shard);
    if (!parsed.ok() || !command.listen.empty()) {
      std::fprintf(stderr, "encoder_worker: %s\n",
                   parsed.ok() ? "--shard is for batch mode (--dataset/--cache), not --listen"
                               : std::string(parsed.status().message()).c_str());
      return 2;
    }
    shard = *parsed;
  }
  if (command.model.empty() || (command.listen.empty() && (command.dataset.empty() || command.cache.empty()))) {
    std::fprintf(stderr, "encoder_worker: --model and either --dataset/--cache or --listen are required (--help)\n");
    return 2;
  }
  if (!command.listen.empty()) {  // rpc/tls_flags.h: the service needs --tls_dir or --insecure
    auto security = InstallSecurityFromFlags("encoder_worker", /*warn_insecure=*/false);
    if (!security.ok()) {
      std::fprintf(stderr, "%s\n", std::string(security.status().message()).c_str());
      return 2;
    }
  }
  for (const std::string& folder : command.follow_links_into) {
    if (!IsDirectory(folder)) {
      std::fprintf(stderr, "encoder_worker: --follow_links_into %s is not a folder\n", folder.c_str());
      return 2;
    }
  }
  auto metrics =
      StartMetricsServerFromFlag(command.metrics, "encoder_worker", /*print=*/true, RefreshDeviceMemoryGauges);
  if (!metrics.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", std::string(metrics.status().message()).c_str());
    return 2;
  }
  if (*metrics) StartEncoderMetrics();
  if (command.threads > 0) SetComputeThreads(command.threads);
  auto dtype = ParseDtype(command.dtype);
  if (!dtype.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", std::string(dtype.status().message()).c_str());
    return 2;
  }
  auto quantize = ParseWeightQuant(command.quantize);
  if (!quantize.ok()) {
    std::fprintf(stderr, "encoder_worker: --quantize: %s\n", std::string(quantize.status().message()).c_str());
    return 2;
  }
  auto resolutions = ParseResolutions(command.resolution);
  if (!resolutions.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", std::string(resolutions.status().message()).c_str());
    return 2;
  }
  auto frame_buckets = ParseFrameBuckets(command.frames);
  absl::Status extraction =
      CheckClipExtraction({command.frame_extraction, command.clips_per_video, command.slide_stride});
  if (!frame_buckets.ok() || !extraction.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n",
                 std::string((frame_buckets.ok() ? extraction : frame_buckets.status()).message()).c_str());
    return 2;
  }
  auto encoder = OpenEncoder(command, *dtype, *quantize);
  if (!encoder.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", encoder.status().ToString().c_str());
    return 1;
  }
  if (!command.listen.empty()) {
    EncoderServiceConfig config;
    config.default_resolutions = *resolutions;
    config.cache_root = command.cache_root.empty() ? "." : command.cache_root;
    config.quantize = *quantize;
    config.follow_links_into = command.follow_links_into;
    config.video.max_frames = command.max_frames;
    config.video.stride = command.frame_stride;
    config.video.frame_buckets = *frame_buckets;
    config.extraction = {command.frame_extraction, command.clips_per_video, command.slide_stride};
    absl::Status s = ServeEncoder(encoder->get(), command.listen, config);
    if (!s.ok()) std::fprintf(stderr, "encoder_worker: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  return BuildOneCache(command, **encoder, shard, *resolutions, *frame_buckets);
}

}  // namespace baton
