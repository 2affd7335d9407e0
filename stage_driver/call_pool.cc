#include "stage_driver/call_pool.h"

#include <chrono>

namespace baton {

CallPool::CallPool(int threads) {
  absl::MutexLock lock(&mu_);
  Grow(threads);
}

CallPool::~CallPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

int CallPool::threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void CallPool::Grow(int threads) {
  while (static_cast<int>(threads_.size()) < threads) threads_.emplace_back([this] { Work(); });
}

void CallPool::Work() {
  for (;;) {
    std::function<void()> call;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CallPool* pool)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) { return pool->stopping_ || !pool->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      call = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    call();
  }
}

std::vector<absl::Status> CallPool::Run(int n, const std::function<absl::Status(int)>& call,
                                        const std::function<void(int, double)>& waiting) {
  std::vector<absl::Status> results(n);
  absl::Mutex done_mu;
  std::vector<bool> done(n, false);  // under done_mu
  int left = n;                      // under done_mu
  const auto t0 = std::chrono::steady_clock::now();
  {
    absl::MutexLock lock(&mu_);
    // Enough threads that none of these calls waits behind another: a call may wait on its peers' (a rendezvous).
    Grow(running_ + static_cast<int>(queue_.size()) + n);
    for (int i = 0; i < n; ++i) {
      queue_.push_back([&, i] {
        absl::Status status = call(i);
        {
          absl::MutexLock pool_lock(&mu_);  // before it counts as done: the next Run must not count it
          --running_;
        }
        absl::MutexLock done_lock(&done_mu);
        results[i] = std::move(status);
        done[i] = true;
        --left;
      });
    }
  }
  auto all_done = [&left]() { return left == 0; };
  for (;;) {
    std::vector<int> open;
    {
      absl::MutexLock lock(&done_mu);
      if (done_mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Milliseconds(100))) break;
      for (int i = 0; i < n; ++i) {
        if (!done[i]) open.push_back(i);
      }
    }
    // Outside the lock: the report may take locks of its own.
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int i : open) {
      if (waiting) waiting(i, seconds);
    }
  }
  return results;
}

}  // namespace baton
