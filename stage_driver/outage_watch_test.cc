#include "stage_driver/outage_watch.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

using Clock = OutageWatch::Clock;

Clock::time_point At(double seconds) {
  static const Clock::time_point t0 = Clock::now();
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A 15 s stall timeout: the first line when the stall watch reports a stage silent for 7.5 s, one every 15 s after
// (from the recovery's wait, which does not know when the silence began), a refresh for the metric at most once a
// second between them, and the last line when it is back; names carry the replica and the global worker index.
TEST(OutageWatchTest, SaysItWhenItBeginsEveryStallTimeoutAndWhenItEnds) {
  std::vector<StageOutage> reports;
  OutageWatch watch;
  watch.Configure(/*first_worker=*/2, "replica 1: ", absl::Seconds(15),
                  [&](const StageOutage& o) { reports.push_back(o); });
  EXPECT_DOUBLE_EQ(watch.FirstAfterSeconds(), 7.5);
  EXPECT_FALSE(watch.Open(1));
  watch.Silent(1, "stage 1 (10.0.0.2:7001)", 7.6, "step 12 waits for it", At(10));
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].notice);
  EXPECT_FALSE(reports[0].over);
  EXPECT_EQ(reports[0].worker, 3);
  EXPECT_EQ(reports[0].name, "replica 1: stage 1 (10.0.0.2:7001)");
  EXPECT_EQ(reports[0].message, "replica 1: stage 1 (10.0.0.2:7001) has not answered for 8 s (step 12 waits for it)");
  EXPECT_TRUE(watch.Open(1));

  watch.Silent(1, "stage 1 (10.0.0.2:7001)", 8.0, "step 12 waits for it", At(10.4));  // < 1 s since: nothing
  EXPECT_EQ(reports.size(), 1u);
  watch.Silent(1, "stage 1 (10.0.0.2:7001)", 0, "waiting up to 1m", At(11.5));  // a refresh for the metric
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_FALSE(reports[1].notice);
  EXPECT_NEAR(reports[1].seconds, 9.1, 1e-6) << "the outage keeps its start";
  EXPECT_TRUE(reports[1].message.empty());
  watch.Silent(1, "stage 1 (10.0.0.2:7001)", 0, "waiting up to 1m for it to come back", At(25.1));
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_TRUE(reports[2].notice);
  EXPECT_EQ(reports[2].message,
            "replica 1: stage 1 (10.0.0.2:7001) has not answered for 23 s (waiting up to 1m for it to come back)");

  watch.Answered(0, At(26));  // another stage: nothing open, nothing said
  EXPECT_EQ(reports.size(), 3u);
  watch.Answered(1, At(42.4));
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_TRUE(reports[3].notice && reports[3].over);
  EXPECT_NEAR(reports[3].seconds, 40, 1e-6);
  EXPECT_EQ(reports[3].message, "replica 1: stage 1 (10.0.0.2:7001) is back after 40 s without an answer");
  EXPECT_FALSE(watch.Open(1));
  watch.Answered(1, At(43));
  EXPECT_EQ(reports.size(), 4u) << "said once";
}

// The recovery finds a remote stage gone without a silence before (it refused the connection): said at once.
TEST(OutageWatchTest, AnOutageTheRecoveryFindsIsSaidAtOnceAndEveryOneEndsWithAnsweredAll) {
  std::vector<StageOutage> reports;
  OutageWatch watch;
  watch.Configure(0, "", absl::Seconds(4), [&](const StageOutage& o) { reports.push_back(o); });
  watch.Silent(0, "stage 0 (h:1)", 0, "waiting up to 1m for it to come back", At(1));
  watch.Silent(1, "stage 1 (h:2)", 3, "step 2 waits for it", At(1));
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].message, "stage 0 (h:1) does not answer (waiting up to 1m for it to come back)");
  watch.Silent(0, "stage 0 (h:1)", 0, "waiting up to 1m for it to come back", At(5.2));
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_TRUE(reports[2].notice) << "every 4 s";
  watch.AnsweredAll(At(6));
  ASSERT_EQ(reports.size(), 5u);
  EXPECT_TRUE(reports[3].over && reports[4].over);
  EXPECT_FALSE(watch.Open(0) || watch.Open(1));
}

// A stopped worker replaced by a new one at another address: the line says so, not that the stopped one is back.
TEST(OutageWatchTest, AWorkerReplacedAtAnotherAddressIsSaidToBeReplaced) {
  std::vector<StageOutage> reports;
  OutageWatch watch;
  watch.Configure(0, "replica 1: ", absl::Seconds(4), [&](const StageOutage& o) { reports.push_back(o); });
  watch.Silent(0, "stage 0 (h:1)", 3, "step 2 waits for it", At(1));
  watch.Silent(1, "stage 1 (h:2)", 3, "step 2 waits for it", At(1));
  watch.AnsweredAllAs({"stage 0 (h:1)", "stage 1 (h:7)"}, At(19));
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(reports[2].message, "replica 1: stage 0 (h:1) is back after 21 s without an answer");
  EXPECT_EQ(reports[3].message,
            "replica 1: stage 1 (h:2) was replaced after 21 s without an answer: replica 1: stage 1 (h:7) answers in "
            "its place");
  EXPECT_TRUE(reports[3].over);
}

}  // namespace
}  // namespace baton
