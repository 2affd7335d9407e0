#include "coordinator/run_report.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

PipelineStepRecord Record(double device_seconds, uint64_t reserved) {
  PipelineStepRecord rec;
  rec.step = 1;
  rec.stages.push_back({0.25, 0.5, 0.125, 1000, device_seconds, reserved});
  return rec;
}

// A CPU stage's line keeps its keys; a CUDA stage's adds the device's own busy time and reserved peak, and the busy
// figure users see (the progress line, the job service) is the device's.
TEST(RunReportTest, CudaStagesReportTheDevicesOwnTimeAndReservedPeak) {
  const nlohmann::ordered_json cpu = StepLine(Record(0, 0));
  EXPECT_EQ(cpu["stage_busy_seconds"][0].get<double>(), 0.75);
  EXPECT_FALSE(cpu.contains("stage_device_busy_seconds"));
  EXPECT_FALSE(cpu.contains("stage_memory_reserved_bytes"));
  EXPECT_EQ(BusySeconds(Record(0, 0).stages[0]), 0.75);

  const nlohmann::ordered_json cuda = StepLine(Record(0.375, 4096));
  EXPECT_EQ(cuda["stage_busy_seconds"][0].get<double>(), 0.75) << "the host's clock stays as it was";
  EXPECT_EQ(cuda["stage_device_busy_seconds"][0].get<double>(), 0.375);
  EXPECT_EQ(cuda["stage_memory_reserved_bytes"][0].get<uint64_t>(), 4096u);
  EXPECT_EQ(BusySeconds(Record(0.375, 4096).stages[0]), 0.375);
}

}  // namespace
}  // namespace baton
