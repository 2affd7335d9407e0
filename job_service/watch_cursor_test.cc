// A watcher's cursor across a resume (job_queue.h AfterRestarts): the steps, checkpoints and evaluations a resumed
// run drops and redoes are seen again; a cursor that saw no resume, or the first start, is left as it was.
#include <gtest/gtest.h>

#include "job_service/job_queue.h"

namespace baton {
namespace {

v1::WatchEvent Validation(int64_t step) {
  v1::WatchEvent e;
  e.mutable_validation()->set_step(step);
  return e;
}

TEST(WatchCursorTest, AResumeTakesTheCursorBackToItsStep) {
  WatchCursor seen;  // a watcher that saw steps 1..5, checkpoints 2 and 4, validations 0, 2, 4 of the first run
  seen.from_step = 5;
  seen.checkpoints_seen = 2;
  seen.evals_seen = 3;
  seen.restarts_seen = 1;
  // The run failed and went on from its checkpoint at step 2: the history keeps what came up to it.
  const std::vector<int64_t> checkpoints = {2};
  const std::vector<v1::WatchEvent> evals = {Validation(0), Validation(2)};
  const WatchCursor back = AfterRestarts(seen, 2, 2, checkpoints, evals);
  EXPECT_EQ(back.from_step, 2);
  EXPECT_EQ(back.checkpoints_seen, 1u);
  EXPECT_EQ(back.evals_seen, 2u);
  EXPECT_EQ(back.restarts_seen, 2u);
  // The same resume once noted: nothing moves.
  const WatchCursor again = AfterRestarts(back, 2, 2, checkpoints, evals);
  EXPECT_EQ(again.from_step, 2);
  EXPECT_EQ(again.evals_seen, 2u);
  // A new watcher (no resume known yet) keeps what it asked for.
  WatchCursor fresh;
  fresh.from_step = 4;
  const WatchCursor first = AfterRestarts(fresh, 2, 2, checkpoints, evals);
  EXPECT_EQ(first.from_step, 4);
  EXPECT_EQ(first.restarts_seen, 2u);
}

}  // namespace
}  // namespace baton
