#include "encoder_worker/encoder_service.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "core/util/stop_signals.h"
#include "core/video/clip_windows.h"
#include "encoder_worker/dataset.h"
#include "rpc/grpc_status.h"
#include "rpc/health.h"
#include "rpc/server_start.h"
#include "wire/wire.h"

namespace baton {

std::string RenderEncodeProgress(const CacheBuildProgress& p, double seconds_per_encoded) {
  const int width = 24;
  int filled = p.total > 0 ? static_cast<int>(width * p.done / p.total) : width;
  double rate = p.done > 0 ? p.elapsed_seconds / static_cast<double>(p.done) : 0;
  double eta = rate * static_cast<double>(p.total - p.done);
  return absl::StrFormat("[%s%s] %d/%d  encoded %d  kept %d  failed %d  %.2f s/sample  ETA %.0fs  %s",
                         std::string(filled, '#'), std::string(width - filled, '.'), p.done, p.total, p.encoded, p.kept,
                         p.failed, seconds_per_encoded > 0 ? seconds_per_encoded : rate, eta, p.current);
}

namespace {

// Releases a mutex that TryLock took, on every way out (a C++ exception included).
class ABSL_SCOPED_LOCKABLE AdoptedLock {
 public:
  explicit AdoptedLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) : mu_(mu) {}
  ~AdoptedLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  AdoptedLock(const AdoptedLock&) = delete;
  AdoptedLock& operator=(const AdoptedLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

}  // namespace

grpc::Status EncoderServiceImpl::EncodeDataset(grpc::ServerContext* ctx, const v1::EncodeDatasetRequest* req,
                                               grpc::ServerWriter<v1::EncodeProgress>* writer) {
  if (!busy_.TryLock()) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "this encoder worker is already encoding a dataset");
  }
  AdoptedLock lock(&busy_);
  if (req->dataset_dir().empty() || req->cache_dir().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "dataset_dir and cache_dir are required");
  }
  if (!req->quantize().empty() && req->quantize() != WeightQuantName(config_.quantize)) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("the job asks for a ", req->quantize(),
                     " text encoder (encode.quantize); this "
                     "encoder worker runs ",
                     WeightQuantName(config_.quantize), " (start it with --quantize ", req->quantize(), ")"));
  }
  // The cache folder, and the records/ folder a build writes and prunes, must resolve inside the cache root
  // (symlinks included): the service never writes or deletes elsewhere.
  auto cache_dir =
      ResolveForWriteInsideRoot(config_.cache_root.empty() ? "." : config_.cache_root, req->cache_dir(), "cache_dir");
  if (cache_dir.ok()) {
    auto records = ResolveForWriteInsideRoot(config_.cache_root.empty() ? "." : config_.cache_root,
                                             JoinPath(*cache_dir, "records"), "cache_dir/records");
    if (!records.ok()) cache_dir = records.status();
  }
  if (!cache_dir.ok()) {
    LogWarning("refused EncodeDataset: ", cache_dir.status().message());
    return ToGrpcStatus(Annotate(cache_dir.status(), "encoder_worker --cache_root"));
  }
  CacheBuildOptions options;
  options.dataset_dir = req->dataset_dir();
  options.cache_dir = *cache_dir;
  options.trigger = req->trigger();
  options.follow_links_into = config_.follow_links_into;
  options.control_dir = req->control_dir();
  // Wan clips: the worker's --max_frames and --frame_stride; the request's frame buckets and extraction (the job's
  // encode keys of the flags' names), else the worker's flags.
  options.video = config_.video;
  auto frames = CheckFrameBuckets(std::vector<int64_t>(req->frames().begin(), req->frames().end()));
  if (!frames.ok()) return ToGrpcStatus(Annotate(frames.status(), "frames"));
  if (!frames->empty()) options.video.frame_buckets = *frames;
  options.extraction = config_.extraction;
  if (!req->frame_extraction().empty()) {
    options.extraction = {req->frame_extraction(), req->clips_per_video(),
                          req->slide_stride() > 0 ? req->slide_stride() : 1};
  }
  if (absl::Status s = CheckClipExtraction(options.extraction); !s.ok()) return ToGrpcStatus(s);
  options.resolutions.assign(req->resolutions().begin(), req->resolutions().end());
  if (options.resolutions.empty()) {
    options.resolutions = req->resolution() > 0 ? std::vector<int64_t>{req->resolution()} : config_.default_resolutions;
  }
  if (!ValidResolutions(options.resolutions)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("resolutions ", absl::StrJoin(options.resolutions, ","),
                                     ": each must be in [16, 8192] and given once"));
  }
  options.buckets = BucketsForResolution(options.resolutions.front());
  if (req->shard_count() != 0 || req->shard_index() != 0) {
    const ShardSpec shard{req->shard_index(), req->shard_count()};
    if (shard.count < 1 || shard.count > kMaxShards || shard.index < 0 || shard.index >= shard.count) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("shard_index/shard_count ", shard.ToString(),
                                                                           ": expected 0 <= i < N <= ", kMaxShards));
    }
    options.shard = shard;
  }
  LogInfo("encoding ", options.dataset_dir, " into ", options.cache_dir,
          options.shard ? absl::StrCat(" (shard ", options.shard->ToString(), ")") : "");
  auto report = BuildCache(*encoder_, options, [&](const CacheBuildProgress& p) {
    v1::EncodeProgress msg;
    msg.set_done(p.done);
    msg.set_total(p.total);
    msg.set_encoded(p.encoded);
    msg.set_kept(p.kept);
    msg.set_failed(p.failed);
    msg.set_elapsed_seconds(p.elapsed_seconds);
    msg.set_current(p.current);
    if (!ctx->IsCancelled()) writer->Write(msg);
  });
  if (!report.ok()) return ToGrpcStatus(report.status());
  v1::EncodeProgress last;
  last.set_done(report->samples);
  last.set_total(report->samples);
  last.set_encoded(report->encoded);
  last.set_kept(report->kept);
  last.set_failed(static_cast<int64_t>(report->errors.size()));
  last.set_elapsed_seconds(report->seconds);
  last.set_finished(true);
  for (const auto& e : report->errors) last.add_errors(absl::StrCat(e.path, ": ", e.status.message()));
  writer->Write(last);
  return grpc::Status::OK;
}

namespace {

constexpr int kMaxPrompts = 256;
constexpr size_t kMaxPromptBytes = kMaxCaptionBytes;  // a sample prompt is a caption at sampling time

absl::Status CheckPromptsRequest(const v1::EncodePromptsRequest& req, const SampleEncoder& encoder) {
  if (req.prompts_size() < 1 || req.prompts_size() > kMaxPrompts) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodePrompts takes 1 to ", kMaxPrompts, " prompts, got ", req.prompts_size()));
  }
  for (int i = 0; i < req.prompts_size(); ++i) {
    if (req.prompts(i).size() > kMaxPromptBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt ", i, " has ", req.prompts(i).size(), " bytes; at most ", kMaxPromptBytes));
    }
  }
  if (req.max_sequence_length() <= 0) return absl::InvalidArgumentError("max_sequence_length must be positive");
  if (encoder.encodes_video()) {
    return absl::UnimplementedError(
        absl::StrCat("sample prompts are encoded for FLUX.2 pipelines only; this worker serves ", encoder.identity()));
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status EncoderServiceImpl::EncodePrompts(grpc::ServerContext* ctx, const v1::EncodePromptsRequest* req,
                                               grpc::ServerWriter<v1::EncodePromptsReply>* writer) {
  if (absl::Status s = CheckPromptsRequest(*req, fixed_encoder()); !s.ok()) return ToGrpcStatus(s);
  absl::MutexLock lock(&busy_);
  LogInfo("encoding ", req->prompts_size(), " sample prompts");
  v1::EncodePromptsReply reply;
  reply.set_identity(encoder_->identity());
  for (int i = 0; i < req->prompts_size(); ++i) {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
    auto embeds = encoder_->EncodeText(req->prompts(i));
    if (!embeds.ok()) return ToGrpcStatus(Annotate(embeds.status(), absl::StrCat("prompt ", i)));
    if (embeds->size(0) != req->max_sequence_length()) {
      return ToGrpcStatus(absl::FailedPreconditionError(
          absl::StrCat("this encoder worker pads prompts to ", embeds->size(0),
                       " tokens (its --max_sequence_length; the cache it writes has that length), the caller asks for ",
                       req->max_sequence_length())));
    }
    absl::Status s = AppendTensorChunks(absl::StrCat(i), *embeds, kMaxChunkBytes, [&](v1::TensorChunk&& c) {
      *reply.mutable_chunk() = std::move(c);
      const bool ok = writer->Write(reply);
      reply.clear_identity();
      return ok;
    });
    if (!s.ok()) return ToGrpcStatus(s);
  }
  return grpc::Status::OK;
}

absl::Status ServeEncoder(SampleEncoder* encoder, const std::string& listen, const EncoderServiceConfig& config) {
  EncoderServiceImpl service(encoder, config);
  ASSIGN_OR_RETURN(StartedServer started, StartServer("encoder_worker", listen, &service, kEncoderServiceName));
  const std::string& address = started.address;
  const std::atomic<bool>& stop = InstallStopSignals(SecondSignal::kStops).stop;
  std::printf("LISTENING %s\n", address.c_str());
  std::fflush(stdout);
  while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  StopServer(*started.server);
  return absl::OkStatus();
}

}  // namespace baton
