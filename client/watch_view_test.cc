#include "client/watch_view.h"

#include <absl/time/clock.h>
#include <gtest/gtest.h>

namespace baton {
namespace {

// Display width in cells: each block character is one cell (3 bytes in UTF-8), a space one.
int Cells(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

TEST(WatchViewTest, BlockBarHasTheWidthAndEighthsOfTheFraction) {
  EXPECT_EQ(BlockBar(0, 8), std::string(8, ' '));
  EXPECT_EQ(BlockBar(1, 4), "████");
  EXPECT_EQ(BlockBar(0.5, 4), "██  ");
  EXPECT_EQ(BlockBar(1.0 / 32, 4), "▏   ");  // one eighth of one cell
  EXPECT_EQ(BlockBar(2.5, 3), "███");        // clamped
  for (double f : {0.0, 0.13, 0.5, 0.77, 1.0}) EXPECT_EQ(Cells(BlockBar(f, 20)), 20) << f;
}

TEST(WatchViewTest, DurationsReadAsAPersonWritesThem) {
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(7620), "2h07m");
  EXPECT_EQ(FormatDuration(-1), "-");
}

TEST(WatchViewTest, PlainLineAndPanelShowStepLossPaceAndStageBusy) {
  v1::JobInfo job;
  job.set_job_id("7");
  job.set_name("style");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_total_steps(100);
  v1::StepProgress* step = job.mutable_last_step();
  step->set_step(25);
  step->set_total_steps(100);
  step->set_loss(0.125);
  step->set_learning_rate(1e-4);
  step->set_step_seconds(2.0);
  step->set_samples_per_second(2.0);
  step->set_eta_seconds(150);
  step->add_stages()->set_busy_seconds(1.5);
  step->add_stages()->set_busy_seconds(1.0);
  EXPECT_EQ(PlainStepLine(job, *step),
            "job 7 step 25/100 loss 0.12500 lr 1.00e-04 2.000 s/step 2.0 samples/s ETA 2m30s busy 75% 50%");
  const std::string panel = JobPanel(job, 8);
  EXPECT_NE(panel.find("job 7  style  running  step 25/100  ██        25%"), std::string::npos) << panel;
  EXPECT_NE(panel.find("stage 0  ██████    75% busy"), std::string::npos) << panel;
  EXPECT_NE(panel.find("stage 1  ████      50% busy"), std::string::npos) << panel;
  EXPECT_NE(panel.find("ETA 2m30s"), std::string::npos) << panel;
  EXPECT_EQ(panel.find("validation"), std::string::npos) << panel;  // none yet
  EXPECT_EQ(panel.find("replica"), std::string::npos) << panel;     // one pipeline
  job.set_state(v1::JOB_STATE_STOPPED);  // a stopped job has no time left (its last step's ETA was shown)
  EXPECT_NE(JobPanel(job, 8).find("ETA -\n"), std::string::npos) << JobPanel(job, 8);
  job.set_state(v1::JOB_STATE_RUNNING);

  step->add_replica_micro_batches(3);  // two data-parallel replicas, the second slower
  step->add_replica_micro_batches(1);
  step->add_replica_samples_per_second(1.5);
  step->add_replica_samples_per_second(0.5);
  EXPECT_EQ(PlainStepLine(job, *step),
            "job 7 step 25/100 loss 0.12500 lr 1.00e-04 2.000 s/step 2.0 samples/s ETA 2m30s busy 75% 50% split 3+1");
  const std::string replicas = JobPanel(job, 8);
  EXPECT_NE(replicas.find("replica 0  3 micro-batches  1.5 samples/s\n"), std::string::npos) << replicas;
  EXPECT_NE(replicas.find("replica 1  1 micro-batches  0.5 samples/s\n"), std::string::npos) << replicas;
}

TEST(WatchViewTest, EvaluationsReadAsTheCoordinatorPrintsThem) {
  v1::JobInfo job;
  v1::ValidationProgress* v = job.mutable_last_validation();
  v->set_step(30);
  for (double t : {0.1, 0.5}) v->add_timesteps(t);
  for (double l : {1.5, 1.75}) v->add_losses(l);
  v->set_mean(1.625);
  v1::SamplesProgress* s = job.mutable_last_samples();
  s->set_step(30);
  s->set_images(4);
  s->set_seconds_per_sample(0.244);
  s->set_contact_sheet("out/samples/step-30/contact_sheet.png");
  EXPECT_EQ(ValidationLine(*v), "validation after step 30: mean 1.62500 (t=0.1 1.50000, t=0.5 1.75000)");
  EXPECT_EQ(SamplesLine(*s), "samples after step 30: 4 images, 0.24 s each: out/samples/step-30/contact_sheet.png");
  const std::string panel = JobPanel(job, 8);
  EXPECT_NE(panel.find(ValidationLine(*v) + "\n"), std::string::npos) << panel;
  EXPECT_NE(panel.find(SamplesLine(*s) + "\n"), std::string::npos) << panel;
}

// Issue 35, item 4: a stage that does not answer is a line of its own (the coordinator's) and a panel line that counts
// on from when it was said.
TEST(WatchViewTest, AStageThatDoesNotAnswerIsSaidWithItsDuration) {
  v1::StageOutage o;
  o.set_stage(1);
  o.set_name("stage 1 (10.0.0.2:7001)");
  o.set_seconds(23);
  EXPECT_EQ(OutageLine(o), "stage 1 (10.0.0.2:7001) has not answered for 23 s");
  o.set_message("stage 1 (10.0.0.2:7001) has not answered for 23 s (waiting up to 1m0s for it to come back)");
  EXPECT_EQ(OutageLine(o), o.message());
  v1::StageOutage back = o;
  back.clear_message();
  back.set_over(true);
  EXPECT_EQ(OutageLine(back), "stage 1 (10.0.0.2:7001) is back after 23 s without an answer");

  v1::JobInfo job;
  job.set_job_id("3");
  job.set_state(v1::JOB_STATE_RUNNING);
  o.set_time_unix(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - 10);  // said 10 s ago
  *job.add_outages() = o;
  const std::string panel = JobPanel(job);
  EXPECT_NE(panel.find("NOT ANSWERING: stage 1 (10.0.0.2:7001) for 33s\n"), std::string::npos) << panel;
}

TEST(WatchViewTest, StateNamesAndSummaryLinesOfEndedJobs) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_QUEUED), "queued");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "running");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_FINISHED), "finished");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_FAILED), "failed");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_STOPPED), "stopped");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_UNSPECIFIED), "unknown");

  v1::JobInfo queued;
  queued.set_job_id("4");
  queued.set_state(v1::JOB_STATE_QUEUED);
  queued.set_total_steps(50);
  EXPECT_EQ(JobSummaryLine(queued), "job 4 queued: step 0/50") << "no step, no start: nothing more";

  v1::JobInfo failed = queued;
  failed.set_state(v1::JOB_STATE_FAILED);
  failed.mutable_last_step()->set_step(12);
  failed.mutable_last_step()->set_loss(0.5);
  failed.set_error("stage 1 (127.0.0.1:7001) unreachable");
  EXPECT_EQ(JobSummaryLine(failed), "job 4 failed: step 12/50, loss 0.50000: stage 1 (127.0.0.1:7001) unreachable");
  const std::string panel = JobPanel(failed, 4);
  EXPECT_NE(panel.find("job 4    failed  step 12/50"), std::string::npos) << panel;
  EXPECT_NE(panel.find("error: stage 1 (127.0.0.1:7001) unreachable\n"), std::string::npos) << panel;
  EXPECT_EQ(panel.find("checkpoint:"), std::string::npos) << panel;
  failed.set_last_checkpoint_step(10);
  EXPECT_NE(JobPanel(failed, 4).find("checkpoint: step 10\n"), std::string::npos);
}

TEST(WatchViewTest, EveryPanelLineEndsTheLine) {
  v1::JobInfo job;
  job.set_job_id("1");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_total_steps(0);  // unknown total: no division by zero
  job.mutable_last_step()->set_step_seconds(0);
  job.mutable_last_step()->add_stages()->set_busy_seconds(0);
  const std::string panel = JobPanel(job, 10);
  ASSERT_FALSE(panel.empty());
  EXPECT_EQ(panel.back(), '\n');
  EXPECT_EQ(panel.find("nan"), std::string::npos) << panel;
  EXPECT_EQ(panel.find("inf"), std::string::npos) << panel;
}

}  // namespace
}  // namespace baton
