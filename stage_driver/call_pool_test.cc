// The call pool: every call of a Run at once on threads it keeps, the slow ones reported while they last.
#include "stage_driver/call_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

namespace baton {
namespace {

TEST(CallPoolTest, EveryCallRunsAtOnceAndItsStatusComesBackByIndex) {
  CallPool pool(2);
  std::atomic<int> arrived{0};
  // Each call waits for all four: they pass only if they run at once (the pool grows past its 2 threads).
  auto statuses = pool.Run(
      4,
      [&](int i) {
        ++arrived;
        while (arrived.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return i == 2 ? absl::UnavailableError("stage 2 gone") : absl::OkStatus();
      },
      nullptr);
  ASSERT_EQ(statuses.size(), 4u);
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_TRUE(absl::IsUnavailable(statuses[2])) << statuses[2];
  EXPECT_EQ(pool.threads(), 4);
}

TEST(CallPoolTest, TheThreadsAreKeptBetweenRuns) {
  CallPool pool(3);
  std::set<std::thread::id> first, second;
  absl::Mutex mu;
  for (std::set<std::thread::id>* seen : {&first, &second}) {
    std::atomic<int> arrived{0};
    pool.Run(
        3,
        [&](int) {
          ++arrived;
          while (arrived.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          absl::MutexLock lock(&mu);
          seen->insert(std::this_thread::get_id());
          return absl::OkStatus();
        },
        nullptr);
  }
  EXPECT_EQ(first.size(), 3u);
  EXPECT_EQ(first, second) << "the same three threads answer every run";
  EXPECT_EQ(pool.threads(), 3);
}

TEST(CallPoolTest, ACallNotReturnedIsReportedWhileItLasts) {
  CallPool pool(2);
  absl::Mutex mu;
  std::set<int> reported;
  double longest = 0;
  pool.Run(
      2,
      [&](int i) {
        if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(450));
        return absl::OkStatus();
      },
      [&](int i, double seconds) {
        absl::MutexLock lock(&mu);
        reported.insert(i);
        longest = std::max(longest, seconds);
      });
  EXPECT_EQ(reported, std::set<int>({1})) << "only the slow call";
  EXPECT_GE(longest, 0.2);
}

}  // namespace
}  // namespace baton
