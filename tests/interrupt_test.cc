// Interrupting `coordinator --job` as a user does, with real signals: a run stopped by SIGINT/SIGTERM exits
// 128 + signal (130/143), distinct from success, after checkpointing the step it was on; a signal during
// start-up, while the stage workers are not even reachable, stops at once instead of being ignored.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "core/data/cache.h"
#include "core/model/flux2_weights.h"
#include "core/testing/paths.h"
#include "core/testing/spawn.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

// Exit code of `pid`, waiting up to `limit` (then SIGKILL and -1).
int WaitExit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class InterruptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("interrupt"));
    Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(*dir_, "model"), 1).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(*dir_, "cache"), c.in_channels, c.joint_attention_dim, 8, {{2, 2}}, 5, 3).ok());
    ASSERT_TRUE(
        WriteFileAtomic(JoinPath(*dir_, "job.yaml"),
                        absl::StrCat("model: ", JoinPath(*dir_, "model"), "\ndataset: ", JoinPath(*dir_, "cache"),
                                     "\nlora: {rank: 4}\nsteps: 100000\nbatch_size: 2\nmicro_batches: 2\n"))
            .ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::vector<std::string> Coordinator(const std::string& out) {
    return {JoinPath(test_util::BinDir(), "coordinator"),
            "--stages",
            "2",
            "--job",
            JoinPath(*dir_, "job.yaml"),
            "--output",
            JoinPath(*dir_, out)};
  }
  static std::string Log(const std::string& name) {
    auto text = ReadFile(JoinPath(*dir_, name));
    return text.ok() ? *text : "";
  }

  static std::string* dir_;
};
std::string* InterruptTest::dir_ = nullptr;

TEST_F(InterruptTest, SigtermMidRunCheckpointsAndExits143) {
  pid_t pid = test_util::SpawnLogged(Coordinator("mid"), JoinPath(*dir_, "mid.log"));
  ASSERT_GT(pid, 0);
  const std::string train_log = JoinPath(JoinPath(*dir_, "mid"), "train_log.jsonl");
  for (int i = 0; i < 600; ++i) {  // until three steps are done
    const std::string lines = Log("mid/train_log.jsonl");
    if (std::count(lines.begin(), lines.end(), '\n') >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitExit(pid, std::chrono::seconds(30)), 143) << Log("mid.log");
  const std::string lines = Log("mid/train_log.jsonl");
  const int64_t steps = std::count(lines.begin(), lines.end(), '\n');
  ASSERT_GE(steps, 3);
  EXPECT_NE(Log("mid.log").find(absl::StrCat("interrupted by SIGTERM after step ", steps, " of 100000")),
            std::string::npos)
      << Log("mid.log");
  EXPECT_TRUE(PathExists(JoinPath(JoinPath(JoinPath(*dir_, "mid"), "checkpoints"), absl::StrCat("step-", steps))));
}

TEST_F(InterruptTest, SigintWhileWaitingForWorkersStopsAtOnceWith130) {
  // Nothing listens on these ports: the coordinator would wait 60 s for them.
  std::vector<std::string> args = Coordinator("early");
  for (const char* a : {"--workers", "127.0.0.1:1,127.0.0.1:2", "--connect_timeout_s", "60", "--insecure"}) {
    args.push_back(a);
  }
  pid_t pid = test_util::SpawnLogged(args, JoinPath(*dir_, "early.log"));
  ASSERT_GT(pid, 0);
  // Past start-up (libtorch loaded, flags read: the --insecure warning; the stop signals are installed right after),
  // into the wait for the workers. A fixed 2 s sleep was too short on a loaded machine (the signal came first).
  for (int i = 0; i < 600 && Log("early.log").find("WARNING: --insecure") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(pid, SIGINT), 0);
  EXPECT_EQ(WaitExit(pid, std::chrono::seconds(30)), 130) << Log("early.log");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(Log("early.log").find("stopped while waiting for it"), std::string::npos) << Log("early.log");
  EXPECT_FALSE(PathExists(JoinPath(JoinPath(*dir_, "early"), "checkpoints")));
}

}  // namespace
}  // namespace baton
