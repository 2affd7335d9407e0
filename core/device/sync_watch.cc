#include "core/device/sync_watch.h"

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>

#ifdef BATON_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Backtrace.h>
#include <c10/util/Exception.h>
#endif

namespace baton {

#ifdef BATON_WITH_CUDA
namespace {

// c10's message for a synchronizing call under the debug mode (c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync).
constexpr char kSyncMessage[] = "called a synchronizing CUDA operation";

class SyncHandler : public c10::WarningHandler {
 public:
  explicit SyncHandler(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find(kSyncMessage) == std::string::npos) {
      next_->process(warning);
      return;
    }
    std::string site = c10::get_backtrace(/*frames_to_skip=*/3, /*maximum_number_of_frames=*/12);
    absl::MutexLock lock(&mu_);
    sites_.push_back(std::move(site));
  }
  std::vector<std::string> sites() const {
    absl::MutexLock lock(&mu_);
    return sites_;
  }

 private:
  c10::WarningHandler* const next_;
  mutable absl::Mutex mu_;
  std::vector<std::string> sites_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

struct SyncWatch::State {
  explicit State(c10::WarningHandler* next) : handler(next), guard(&handler) {}
  SyncHandler handler;
  c10::WarningUtils::WarningHandlerGuard guard;  // this thread's handler while the watch lives
  c10::cuda::SyncDebugMode previous = c10::cuda::warning_state().get_sync_debug_mode();
};

SyncWatch::SyncWatch() : state_(std::make_unique<State>(c10::WarningUtils::get_warning_handler())) {
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
}

SyncWatch::~SyncWatch() { c10::cuda::warning_state().set_sync_debug_mode(state_->previous); }

std::vector<std::string> SyncWatch::sites() const { return state_->handler.sites(); }

// Without a watch the mode is never written, only read: ReadBack on many threads races with nothing.
IntendedSync::IntendedSync() : previous_(static_cast<int>(c10::cuda::warning_state().get_sync_debug_mode())) {
  if (previous_ != static_cast<int>(c10::cuda::SyncDebugMode::L_DISABLED)) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
}

IntendedSync::~IntendedSync() {
  if (previous_ != static_cast<int>(c10::cuda::SyncDebugMode::L_DISABLED)) {
    c10::cuda::warning_state().set_sync_debug_mode(static_cast<c10::cuda::SyncDebugMode>(previous_));
  }
}
#else
struct SyncWatch::State {};
SyncWatch::SyncWatch() = default;
SyncWatch::~SyncWatch() = default;
std::vector<std::string> SyncWatch::sites() const { return {}; }
IntendedSync::IntendedSync() = default;
IntendedSync::~IntendedSync() = default;
#endif

}  // namespace baton
