// The host copy of a stage's state: written whole or not at all, taken back only at the step asked for, deleted when
// the worker is done with it, and the copies of runs that are gone deleted by the next worker (of the same job and
// stage at once, of any other once nobody took them for 30 minutes).
#include "stage_worker/host_state_copy.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/optimizer.h"
#include "core/util/files.h"

namespace baton {
namespace {

HostStateCopy::Tensors State(int64_t steps) {
  return {{"a.lora_A.weight", at::arange(6, at::kFloat).reshape({2, 3}) * static_cast<float>(steps)},
          {"a.lora_A.weight.exp_avg", at::full({2, 3}, 0.5f)},
          {kOptimizerStepKey, at::scalar_tensor(steps, at::kLong)}};
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class HostStateCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::MakeTempDir("host_state_copy");
    ::setenv("BATON_STATE_COPY_DIR", dir_.c_str(), 1);
  }
  void TearDown() override { ::unsetenv("BATON_STATE_COPY_DIR"); }
  std::string dir_;
};

TEST_F(HostStateCopyTest, AWorkerInTheSameRunAndStageTakesTheCopyOfTheStepAskedFor) {
  HostStateCopy writer;
  writer.Use("job/1", "run", 1);  // '/' cannot leave the folder
  ASSERT_TRUE(writer.active());
  EXPECT_EQ(Files(dir_), std::vector<std::string>{});
  ASSERT_TRUE(writer.Write(State(4)).ok());
  EXPECT_EQ(Files(dir_), std::vector<std::string>{"baton-state-job_1-run-s1.safetensors"});
  ASSERT_TRUE(writer.Write(State(5)).ok());  // over a spare, then exchanged with the copy: the copy of step 4 is spare
  ASSERT_TRUE(writer.Write(State(6)).ok());
  ASSERT_TRUE(writer.Write(State(5)).ok());
  EXPECT_EQ(Files(dir_), (std::vector<std::string>{"baton-state-job_1-run-s1.safetensors",
                                                   "baton-state-job_1-run-s1.safetensors.spare"}));
  // A kill during the next write tears the spare, never the copy.
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, "baton-state-job_1-run-s1.safetensors.spare"), "torn").ok());

  HostStateCopy replacement;  // the worker restarted in its place
  replacement.Use("job/1", "run", 1);
  EXPECT_FALSE(replacement.Take(4).has_value()) << "the copy holds step 5";
  std::optional<HostStateCopy::Tensors> taken = replacement.Take(5);
  ASSERT_TRUE(taken.has_value());
  for (const auto& [name, t] : State(5)) EXPECT_TRUE(at::equal(taken->at(name), t)) << name;

  HostStateCopy other_stage;
  other_stage.Use("job/1", "run", 0);
  EXPECT_FALSE(other_stage.Take(5).has_value());
}

TEST_F(HostStateCopyTest, ADroppedCopyIsDeletedAndCopiesOfRunsThatAreGoneToo) {
  // A copy written by a process that then died (a coordinator killed with its workers), in an older run: the pid of
  // a process that has exited, in the copy's metadata as Write puts it there.
  const pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir_, "baton-state-job-old-run-s0.safetensors"), State(3),
                               {{"pid", std::to_string(gone)}})
                  .ok());
  HostStateCopy live_other_job;  // another job's copy, and its writer alive: both kept
  live_other_job.Use("job2", "old-run", 0);
  ASSERT_TRUE(live_other_job.Write(State(1)).ok());
  EXPECT_EQ(Files(dir_), (std::vector<std::string>{"baton-state-job-old-run-s0.safetensors",
                                                   "baton-state-job2-old-run-s0.safetensors"}));

  // Another job's copy whose writer is gone and that nobody took for an hour (its run failed).
  const std::string abandoned = JoinPath(dir_, "baton-state-job3-run-s1.safetensors");
  ASSERT_TRUE(WriteSafetensors(abandoned, State(2), {{"pid", std::to_string(gone)}}).ok());
  std::filesystem::last_write_time(abandoned, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));

  HostStateCopy copy;
  copy.Use("job", "new-run", 0);
  EXPECT_EQ(Files(dir_), std::vector<std::string>{"baton-state-job2-old-run-s0.safetensors"});
  ASSERT_TRUE(copy.Write(State(1)).ok());
  ASSERT_TRUE(copy.Write(State(2)).ok());  // and a spare
  copy.Drop();
  EXPECT_FALSE(copy.active());
  EXPECT_EQ(Files(dir_), std::vector<std::string>{"baton-state-job2-old-run-s0.safetensors"});
}

// On shared stage workers a run is known as "<job hash>-<run suffix>": a resumed run (another suffix) deletes the
// copies of the same job and stage whose writer is gone (a job service killed with its workers), and keeps those of a
// run of the same job file that is still going.
TEST_F(HostStateCopyTest, AResumedRunOnSharedWorkersDeletesItsJobsCopiesOfRunsThatAreGone) {
  const pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir_, "baton-state-4f2a-9e8fa954-run1-s0.safetensors"), State(3),
                               {{"pid", std::to_string(gone)}})
                  .ok());
  HostStateCopy same_job_running;  // the same job file submitted twice, that run still going
  same_job_running.Use("4f2a-6d52193f", "run2", 0);
  ASSERT_TRUE(same_job_running.Write(State(1)).ok());
  HostStateCopy resumed;
  resumed.Use("4f2a-1fc3526c", "run3", 0);
  EXPECT_EQ(Files(dir_), std::vector<std::string>{"baton-state-4f2a-6d52193f-run2-s0.safetensors"});
}

TEST_F(HostStateCopyTest, WithoutTheFolderThereIsNoCopy) {
  ::setenv("BATON_STATE_COPY_DIR", JoinPath(dir_, "missing").c_str(), 1);
  HostStateCopy copy;
  copy.Use("job", "run", 0);
  EXPECT_FALSE(copy.active());
  EXPECT_FALSE(copy.Take(0).has_value());
}

}  // namespace
}  // namespace baton
