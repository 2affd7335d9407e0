// --steps past a job's `steps:` (lr_schedule.h CheckStepsWithinSchedule): refused where the schedule has ended and
// would run on at its floor or climb back; allowed within the job and for schedules without an end.
#include "core/train/lr_schedule.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(LrScheduleTest, StepsPastTheJobAreRefusedWhereTheScheduleHasEnded) {
  OptimizerConfig opt;
  opt.lr = 1e-3;
  opt.schedule = "cosine";
  EXPECT_TRUE(CheckStepsWithinSchedule(opt, 100, 4).ok());  // the first 4 steps of the run
  EXPECT_TRUE(CheckStepsWithinSchedule(opt, 100, 100).ok());
  const absl::Status past = CheckStepsWithinSchedule(opt, 4, 8);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("raise `steps:` in the job file to 8"), std::string::npos) << past;
  // What it would do past the end, as diffusers' lambda: cosine back up to the peak at step 8 of a 4-step schedule.
  EXPECT_GT(LearningRate(opt, 7, 4), LearningRate(opt, 3, 4));
  opt.schedule = "linear";
  EXPECT_FALSE(CheckStepsWithinSchedule(opt, 4, 7).ok());
  EXPECT_EQ(LearningRate(opt, 5, 4), 0.0);
  for (const char* open_ended : {"constant", "constant_with_warmup"}) {
    opt.schedule = open_ended;
    EXPECT_TRUE(CheckStepsWithinSchedule(opt, 4, 40).ok()) << open_ended;
  }
  opt.schedule = "linear";
  opt.type = "adafactor";
  opt.adafactor.relative_step = true;
  EXPECT_TRUE(CheckStepsWithinSchedule(opt, 4, 40).ok());
}

}  // namespace
}  // namespace baton
