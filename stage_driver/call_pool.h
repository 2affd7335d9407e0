// A fixed set of threads for the calls a pipeline makes to every one of its stages at once (the stage-local
// optimizer's JoinGroup, Reduce, Update, LoadState, read-backs): no thread is started per call, and the caller's
// own thread watches the calls that have not returned.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>
#include <absl/synchronization/mutex.h>

#include <deque>
#include <functional>
#include <thread>
#include <vector>

namespace baton {

// Thread-safe: several callers may Run at once (their calls share the threads; the pool grows so that one Run's
// calls never wait for each other).
class CallPool {
 public:
  explicit CallPool(int threads = 0);
  ~CallPool();  // waits for the calls under way

  // call(i) for every i in [0, n), all at once on the pool; while some have not returned, waiting(i, seconds) is
  // called from this thread every 100 ms for each of those (seconds since they began). Each call's status, by i.
  std::vector<absl::Status> Run(int n, const std::function<absl::Status(int)>& call,
                                const std::function<void(int, double)>& waiting) ABSL_LOCKS_EXCLUDED(mu_);
  int threads() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Grow(int threads) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Work() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // calls taken by a thread and not yet returned
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace baton
