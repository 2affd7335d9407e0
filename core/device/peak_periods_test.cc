#include "core/device/peak_periods.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

// Two pipelines on one device, each taking its peak after its own steps, over one counter reset at every take:
// neither take cuts the other's period short.
TEST(PeakPeriodsTest, EachOwnerGetsThePeakOfItsOwnPeriod) {
  PeakPeriods periods;
  // a's first step peaks at 100 and ends with 10 held
  EXPECT_EQ(periods.Take(/*owner=*/1, /*peak=*/100, /*current=*/10), 100);
  // b's step, started before a's take, peaks at 70 after it; b's first take gets what the counter saw since the reset
  EXPECT_EQ(periods.Take(2, 70, 20), 70);
  // a's second step peaks at 30 after b's take: a's period saw b's 70 as well
  EXPECT_EQ(periods.Take(1, 30, 5), 70);
  // b's period since its take: the 30
  EXPECT_EQ(periods.Take(2, 8, 8), 30);
  // a period starts at the level held when it was taken
  EXPECT_EQ(periods.Take(1, 0, 0), 8);
  periods.Forget(2);
  EXPECT_EQ(periods.Take(2, 3, 3), 3) << "a forgotten owner starts afresh";
}

}  // namespace
}  // namespace baton
