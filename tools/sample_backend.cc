#include "tools/sample_backend.h"

#include <unistd.h>

#include <cstdio>

#include "core/sample/model_denoiser.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<std::unique_ptr<SampleBackend>> StartSampleBackend(const Args& args, at::ScalarType dtype,
                                                                  SampleTokens tokens) {
  ASSIGN_OR_RETURN(int64_t stages, args.GetInt("stages"));
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads"));
  auto b = std::make_unique<SampleBackend>();
  if (stages > 0) {  // mutual TLS with an ephemeral CA, as the coordinator's
    StageSessionOptions so;
    so.model = args.Get("model");
    so.lora = args.Has("lora") ? args.Get("lora") : "";
    so.dtype = args.Get("dtype");
    so.threads = static_cast<int>(threads);
    so.tokens = tokens;
    StageDriverOptions driver;
    driver.stages = static_cast<int>(stages);
    driver.quiet = true;
    driver.process = "baton_sample";
    ASSIGN_OR_RETURN(b->session, StageSession::Start(so, driver));
    b->denoiser = b->session->denoiser();
    return b;
  }
  ASSIGN_OR_RETURN(b->local, OpenLocalModel(args, dtype));
  b->denoiser = ModelDenoiser(*b->local.family, *b->local.shell, *b->local.stage, dtype, at::kCPU);
  return b;
}

DenoisingProgress::DenoisingProgress(std::chrono::steady_clock::time_point start)
    : start_(start), tty_(::isatty(STDOUT_FILENO)) {}

void DenoisingProgress::operator()(int64_t done, int64_t total) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::printf("%sdenoising step %lld/%lld (%.1f s)%s", tty_ ? "\r" : "", static_cast<long long>(done),
              static_cast<long long>(total), elapsed, tty_ ? "" : "\n");
  std::fflush(stdout);
}

void DenoisingProgress::Finish() const {
  if (tty_) std::printf("\n");
}

}  // namespace baton
