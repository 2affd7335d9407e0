// The device's memory gauges behind a real metrics server, scraped over HTTP.
#include "core/device/device_memory.h"

#include <gtest/gtest.h>

#include "core/metrics/metrics_server.h"
#include "core/testing/prometheus_scrape.h"

namespace baton {
namespace {

using test_util::HttpGet;
using test_util::SumSamples;

// A stage worker notes its CUDA device at Configure, before its first CUDA tensor (a quantized stage is built on the
// CPU first): a scrape then must not ask the uninitialized caching allocator (it throws, and the exception would
// end the process from the HTTP server's thread). On a GPU-less machine CUDA never initializes, so this is that
// window, for good.
TEST(DeviceMemoryTest, AScrapeBeforeCudaInitializesAnswersWithoutDeviceGauges) {
  if (CudaAllocatorReady()) GTEST_SKIP() << "CUDA is already initialized in this process";
  auto server = MetricsServer::Start("127.0.0.1:0", "stage_worker", RefreshDeviceMemoryGauges);
  ASSERT_TRUE(server.ok()) << server.status();
  NoteCudaDeviceInUse(0);
  for (int scrape = 0; scrape < 2; ++scrape) {
    auto body = HttpGet((*server)->address());
    ASSERT_TRUE(body.ok()) << body.status();
    EXPECT_GT(SumSamples(*body, "baton_process_resident_memory_bytes"), 1 << 20);
    EXPECT_EQ(body->find("baton_device_memory_allocated_bytes{"), std::string::npos) << *body;
  }
  RefreshDeviceMemoryGauges();  // direct, as a scrape does it: returns
  EXPECT_FALSE(CudaAllocatorReady());
}

}  // namespace
}  // namespace baton
