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
#include "encoder_worker/cache_builder.h"

namespace baton {

class EncoderServiceImpl final : public v1::EncoderService::Service {
 public:
  // Caches are written only inside `cache_root` (realpath; "" = the working directory): a request naming a cache
  // elsewhere is refused with PERMISSION_DENIED. `quantize`: the text encoder's precision (--quantize); a request
  // asking for another is refused with FAILED_PRECONDITION. `follow_links_into`: the folders outside a dataset that
  // its symlinks may lead into (--follow_links_into; a request cannot widen it).
  // `default_resolutions`: a request's when it names none (--resolution).
  EncoderServiceImpl(SampleEncoder* encoder, std::vector<int64_t> default_resolutions, std::string cache_root,
                     WeightQuant quantize = WeightQuant::kNone, std::vector<std::string> follow_links_into = {})
      : encoder_(encoder),
        default_resolutions_(std::move(default_resolutions)),
        cache_root_(std::move(cache_root)),
        quantize_(quantize),
        follow_links_into_(std::move(follow_links_into)) {}
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
  const std::vector<int64_t> default_resolutions_;
  const std::string cache_root_;
  const WeightQuant quantize_;
  const std::vector<std::string> follow_links_into_;
};

// Serves EncoderService on `listen` until SIGTERM/SIGINT; prints "LISTENING host:port" once up.
absl::Status ServeEncoder(SampleEncoder* encoder, const std::string& listen,
                          const std::vector<int64_t>& default_resolutions, const std::string& cache_root,
                          WeightQuant quantize = WeightQuant::kNone,
                          const std::vector<std::string>& follow_links_into = {});

// One line of progress ("[####......]  12/40  0.8 s/sample  ETA 22s  cat_01.jpg").
std::string RenderEncodeProgress(const CacheBuildProgress& p, double seconds_per_encoded);

}  // namespace baton
