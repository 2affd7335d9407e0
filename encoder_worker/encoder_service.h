// encoder_worker's two modes: a batch run over one dataset (with a progress bar and ETA) and a gRPC
// EncoderService the coordinator calls to (re)build a cache on demand. Both drive BuildCache.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "baton/v1/encoder.grpc.pb.h"
#include "core/quant/weight_quant.h"
#include "core/video/clip_windows.h"
#include "core/video/video_bucket.h"
#include "encoder_worker/cache_builder.h"

namespace baton {

// The worker's own flags, which every request runs under or falls back to.
struct EncoderServiceConfig {
  // A request's resolutions when it names none (--resolution).
  std::vector<int64_t> default_resolutions;
  // Caches are written only inside it (realpath; "" = the working directory): a request naming a cache elsewhere is
  // refused with PERMISSION_DENIED.
  std::string cache_root;
  // The text encoder's precision (--quantize); a request asking for another is refused with FAILED_PRECONDITION.
  WeightQuant quantize = WeightQuant::kNone;
  // The folders outside a dataset that its symlinks may lead into (--follow_links_into; a request cannot widen it).
  std::vector<std::string> follow_links_into;
  // Wan clips: --max_frames and --frame_stride for every request (no job key sets them), --frames for a request
  // naming no frame buckets.
  VideoBucketSpec video;
  // --frame_extraction, --clips_per_video, --slide_stride for a request naming no frame_extraction.
  ClipExtraction extraction;
};

class EncoderServiceImpl final : public v1::EncoderService::Service {
 public:
  EncoderServiceImpl(SampleEncoder* encoder, EncoderServiceConfig config)
      : encoder_(encoder), config_(std::move(config)) {}
  grpc::Status EncodeDataset(grpc::ServerContext* ctx, const v1::EncodeDatasetRequest* req,
                             grpc::ServerWriter<v1::EncodeProgress>* writer) override;
  grpc::Status EncodePrompts(grpc::ServerContext* ctx, const v1::EncodePromptsRequest* req,
                             grpc::ServerWriter<v1::EncodePromptsReply>* writer) override;

 private:
  // What an encoder answers about itself (identity, encodes_video) is fixed when it is built: read without busy_.
  const SampleEncoder& fixed_encoder() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return *encoder_; }

  // Held by the call encoding with encoder_: EncodeDataset refuses to wait for it, EncodePrompts waits.
  absl::Mutex busy_;
  SampleEncoder* const encoder_ ABSL_PT_GUARDED_BY(busy_);
  const EncoderServiceConfig config_;
};

// Serves EncoderService on `listen` until SIGTERM/SIGINT; prints "LISTENING host:port" once up.
absl::Status ServeEncoder(SampleEncoder* encoder, const std::string& listen, const EncoderServiceConfig& config);

// One line of progress ("[####......]  12/40  0.8 s/sample  ETA 22s  cat_01.jpg").
std::string RenderEncodeProgress(const CacheBuildProgress& p, double seconds_per_encoded);

}  // namespace baton
