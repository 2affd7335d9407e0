// encoder_worker: images + captions (FLUX.2) or video clips + captions (Wan) → the training cache, on CPU. Batch mode
// encodes one dataset and exits (non-zero when any file failed); with --listen it serves EncoderService for the
// coordinator.
#include <absl/flags/flag.h>
#include <absl/flags/parse.h>
#include <absl/flags/usage.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/device/device.h"
#include "core/encode/flux2_encoder.h"
#include "core/encode/wan_encoder.h"
#include "core/metrics/metrics_server.h"
#include "core/train/common.h"
#include "core/util/flags.h"
#include "core/util/log.h"
#include "core/util/threads.h"
#include "encoder_worker/cache_builder.h"
#include "encoder_worker/encoder_service.h"
#include "rpc/tls_flags.h"

ABSL_FLAG(std::string, dataset, "",
          "dataset folder: images (FLUX.2) or video files / frame folders (Wan) with same-named .txt captions");
ABSL_FLAG(std::string, cache, "", "cache folder to write (reruns keep unchanged samples)");
ABSL_FLAG(std::string, model, "",
          "FLUX.2 or Wan diffusers pipeline folder (vae/, text_encoder/, tokenizer/; the family from "
          "model_index.json)");
ABSL_FLAG(int, threads, 0, "compute threads (0 = all cores)");
ABSL_FLAG(std::string, trigger, "", "trigger word added to every caption");
ABSL_FLAG(int64_t, resolution, 1024, "bucket target: area = resolution², sides multiples of 16");
ABSL_FLAG(int64_t, max_sequence_length, 512, "text tokens per caption (pads and truncates to this)");
ABSL_FLAG(int64_t, max_frames, 81, "Wan: frames per clip, the largest 4k+1 up to this");
ABSL_FLAG(int64_t, frame_stride, 1, "Wan: take every N-th source frame");
ABSL_FLAG(std::string, dtype, "fp32", "compute dtype: fp32 | bf16");
ABSL_FLAG(std::string, listen, "", "serve EncoderService on host:port instead of a batch run");
ABSL_FLAG(std::string, cache_root, "",
          "service mode: write caches only inside this directory, symlinks resolved (default: the working "
          "directory); requests naming a cache elsewhere are refused");
ABSL_FLAG(std::string, metrics, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free one); empty = no metrics");

namespace {

// The model family from the folder: a Wan pipeline (model_index.json / transformer config) or FLUX.2.
absl::StatusOr<std::unique_ptr<baton::SampleEncoder>> OpenEncoder(const std::string& model, at::ScalarType dtype) {
  if (baton::IsWanPipelineFolder(model)) {
    baton::WanEncoderOptions options;
    options.dtype = dtype;
    options.max_sequence_length = absl::GetFlag(FLAGS_max_sequence_length);
    auto e = baton::WanSampleEncoder::Open(model, options);
    if (!e.ok()) return e.status();
    return std::unique_ptr<baton::SampleEncoder>(std::move(*e));
  }
  baton::Flux2EncoderOptions options;
  options.dtype = dtype;
  options.max_sequence_length = absl::GetFlag(FLAGS_max_sequence_length);
  auto e = baton::Flux2SampleEncoder::Open(model, options);
  if (!e.ok()) return e.status();
  return std::unique_ptr<baton::SampleEncoder>(std::move(*e));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "encoder_worker --dataset DIR --cache DIR --model PIPELINE_DIR [--threads K] [--metrics HOST:PORT]\n"
      "       encoder_worker --model PIPELINE_DIR --listen HOST:PORT (--tls_dir DIR | --insecure)");
  baton::InstallVersionFlag();
  baton::InstallFlagsHelp();
  baton::NormalizeFlagArgs(argc, argv);
  absl::ParseCommandLine(argc, argv);
  baton::SetLogTag("encoder_worker");
  if (absl::GetFlag(FLAGS_model).empty() ||
      (absl::GetFlag(FLAGS_listen).empty() &&
       (absl::GetFlag(FLAGS_dataset).empty() || absl::GetFlag(FLAGS_cache).empty()))) {
    std::fprintf(stderr, "encoder_worker: --model and either --dataset/--cache or --listen are required (--help)\n");
    return 2;
  }
  if (!absl::GetFlag(FLAGS_listen).empty()) {  // rpc/tls_flags.h: the service needs --tls_dir or --insecure
    auto security = baton::InstallSecurityFromFlags("encoder_worker", /*warn_insecure=*/false);
    if (!security.ok()) {
      std::fprintf(stderr, "%s\n", std::string(security.status().message()).c_str());
      return 2;
    }
  }
  auto metrics = baton::StartMetricsServerFromFlag(absl::GetFlag(FLAGS_metrics), "encoder_worker");
  if (!metrics.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", std::string(metrics.status().message()).c_str());
    return 2;
  }
  if (*metrics) baton::StartEncoderMetrics();
  if (absl::GetFlag(FLAGS_threads) > 0) baton::SetComputeThreads(absl::GetFlag(FLAGS_threads));
  auto dtype = baton::ParseDtype(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", std::string(dtype.status().message()).c_str());
    return 2;
  }
  auto encoder = OpenEncoder(absl::GetFlag(FLAGS_model), *dtype);
  if (!encoder.ok()) {
    std::fprintf(stderr, "encoder_worker: %s\n", encoder.status().ToString().c_str());
    return 1;
  }
  if (!absl::GetFlag(FLAGS_listen).empty()) {
    absl::Status s =
        baton::ServeEncoder(encoder->get(), absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_resolution),
                            absl::GetFlag(FLAGS_cache_root).empty() ? "." : absl::GetFlag(FLAGS_cache_root));
    if (!s.ok()) std::fprintf(stderr, "encoder_worker: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  baton::CacheBuildOptions build;
  build.dataset_dir = absl::GetFlag(FLAGS_dataset);
  build.cache_dir = absl::GetFlag(FLAGS_cache);
  build.trigger = absl::GetFlag(FLAGS_trigger);
  build.buckets = baton::BucketsForResolution(absl::GetFlag(FLAGS_resolution));
  build.video.max_frames = absl::GetFlag(FLAGS_max_frames);
  build.video.stride = absl::GetFlag(FLAGS_frame_stride);
  const bool tty = ::isatty(STDOUT_FILENO);
  auto report = baton::BuildCache(**encoder, build, [&](const baton::CacheBuildProgress& p) {
    std::printf("%s%s%s", tty ? "\r\033[K" : "", baton::RenderEncodeProgress(p, 0).c_str(), tty ? "" : "\n");
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
  std::printf(
      "encoded %lld, kept %lld unchanged, %zu failed of %lld samples in %.1f s (%.3f s per encoded sample, "
      "peak RSS %.0f MiB); cache: %s\n",
      static_cast<long long>(report->encoded), static_cast<long long>(report->kept), report->errors.size(),
      static_cast<long long>(report->samples), report->seconds, report->seconds_per_encoded_sample,
      usage.ru_maxrss / 1024.0, build.cache_dir.c_str());
  return report->errors.empty() ? 0 : 1;
}
