// Where `baton sample` denoises, for FLUX.2 images and Wan videos alike: the whole model in this process (--stages
// 0, with --lora attached) or N local stage workers planned, started and configured as a training run's; and the
// "denoising step k/N" line both print (rewritten in place on a terminal, one line per step in a log).
#pragma once

#include <absl/status/statusor.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "client/args.h"
#include "core/sample/denoiser.h"
#include "stage_driver/stage_session.h"
#include "tools/local_model.h"

namespace baton {

struct SampleBackend {
  LoadedModel local;                      // --stages 0 (a Wan 2.2 A14B folder: its high-noise expert)
  LoadedModel low;                        // a Wan 2.2 A14B folder's low-noise expert
  std::unique_ptr<StageSession> session;  // --stages N
  Denoiser denoiser;                      // reads `local` or `session`, so the backend stays where it is made
  absl::Status Stop() { return session ? session->Stop() : absl::OkStatus(); }
};

// --model, --lora, --lora-scale, --dtype, --threads, --stages; `tokens`: one sample's, for the stage planner.
absl::StatusOr<std::unique_ptr<SampleBackend>> StartSampleBackend(const Args& args, at::ScalarType dtype,
                                                                  SampleTokens tokens);

class DenoisingProgress {
 public:
  explicit DenoisingProgress(std::chrono::steady_clock::time_point start);
  void operator()(int64_t done, int64_t total) const;
  void Finish() const;  // ends the line a terminal rewrote

 private:
  std::chrono::steady_clock::time_point start_;
  bool tty_;
};

}  // namespace baton
