#include "core/device/threads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

namespace baton {
namespace {

// The intra-op thread count a thread started after SetComputeThreads computes with (a gRPC handler, a
// std::async task): at::get_num_threads() is the OpenMP team size its parallel ops would use. Plain OpenMP
// would answer the machine's core count here; the single setting must reach it.
int IntraOpThreadsInANewThread() {
  return std::async(std::launch::async, [] { return at::get_num_threads(); }).get();
}

TEST(ThreadsTest, OneSettingGovernsThreadsStartedLater) {
  SetComputeThreads(1);
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(IntraOpThreadsInANewThread(), 1);
  EXPECT_EQ(at::get_num_interop_threads(), 1);
  if (std::thread::hardware_concurrency() >= 2) {
    SetComputeThreads(2);  // a later setting reaches new threads too
    EXPECT_EQ(IntraOpThreadsInANewThread(), 2);
    SetComputeThreads(1);
  }
}

}  // namespace
}  // namespace baton
