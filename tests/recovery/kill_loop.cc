// The kill loop (ctest -L recovery): one training run (the coordinator binary with 2 local stage workers,
// checkpoint_every: 1) under random kill -9s -- at least 10 of stage workers, at random points of a step, and 3 of
// the coordinator itself (the first during start-up, before any checkpoint; the others land anywhere, checkpoint
// writes included), each coordinator restarted with --resume=if-any. The final LoRA file must
// equal an uninterrupted run's bitwise. The randomness is seeded and the seed printed: rerun a failure with
// BATON_KILL_LOOP_SEED=<seed>.
//
// A killed stage worker costs the step it was in: its replacement takes the adapters and optimizer state back from
// the host copy the killed one kept (stage_worker/host_state_copy.h), where without it the run would roll back to the
// coordinator's copy (read back at each checkpoint, every 10 steps here). The loop prints the steps redone by
// rollbacks; BATON_KILL_LOOP_HOST_COPIES=0 runs it without the copies, for comparison.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "core/data/cache.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/spawn.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;
using test_util::BinDir;
using test_util::StageWorkersOf;

// Progress lines ("step    3/40  loss ...") in a coordinator's log from byte `from` on.
int StepLines(const std::string& log, size_t from) {
  auto text = ReadFile(log);
  if (!text.ok() || text->size() <= from) return 0;
  int n = 0;
  for (size_t at = text->find("\nstep ", from); at != std::string::npos; at = text->find("\nstep ", at + 1)) {
    const size_t end = text->find('\n', at + 1);
    if (text->substr(at, end == std::string::npos ? std::string::npos : end - at).find("  loss ") !=
        std::string::npos) {
      ++n;
    }
  }
  return n;
}

// The steps a coordinator's log says it redid by rolling back to its copy of the stages' state (a stage's state lost):
// "rolled back to the state of step F, redoing steps F+1..U" redoes U-1-F completed steps (U, the lost one, never
// completed).
int StepsRolledBack(const std::string& log, int* rollbacks, int* taken_back) {
  static const std::regex kRollBack(R"(rolled back to the state of step (\d+), redoing steps? (?:\d+\.\.)?(\d+))");
  const std::string text = ReadFile(log).value_or("");
  for (size_t at = text.find("took back its adapters"); at != std::string::npos;
       at = text.find("took back its adapters", at + 1)) {
    ++*taken_back;
  }
  int redone = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kRollBack); it != std::sregex_iterator(); ++it) {
    redone += std::stoi((*it)[2]) - 1 - std::stoi((*it)[1]);
    ++*rollbacks;
  }
  return redone;
}

size_t FileSize(const std::string& path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<size_t>(n);
}

class KillLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::MakeTempDir("kill_loop");
    Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir_, "model"), 1).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(JoinPath(dir_, "cache"), c.in_channels, c.joint_attention_dim, 12, {{2, 2}, {2, 3}}, 5, 3)
            .ok());
    job_ = JoinPath(dir_, "job.yaml");
    ASSERT_TRUE(
        WriteFileAtomic(job_, absl::StrCat("model: ", JoinPath(dir_, "model"), "\ndataset: ", JoinPath(dir_, "cache"),
                                           "\nlora: {rank: 4, targets: all-linear, dropout: 0.1}\n"
                                           "optimizer: {lr: 0.01, weight_decay: 0.01}\nsteps: 100\n"
                                           "batch_size: 4\nmicro_batches: 4\nschedule: 1f1b\nseed: 3\n"
                                           "checkpoint_every: 10\n"))
            .ok());
  }

  pid_t StartCoordinator(const std::string& out, const std::string& log) {
    std::vector<std::string> args = {
        JoinPath(BinDir(), "coordinator"), "--stages=2",          "--job=" + job_, "--output=" + out,
        "--worker_restart_timeout_s=30",   "--stall_timeout_s=15"};
    // Every start resumes, also the one after a kill before the first checkpoint (if-any: then it starts fresh).
    if (out != reference_) args.push_back("--resume=if-any");
    if (!HostCopies()) args.push_back("--host_state_copies=false");
    return test_util::SpawnLogged(args, log);
  }

  static bool HostCopies() {
    const char* env = std::getenv("BATON_KILL_LOOP_HOST_COPIES");
    return env == nullptr || std::string(env) != "0";
  }

  static int Wait(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string dir_, job_, reference_;
};

TEST_F(KillLoop, RandomKillsOfWorkersAndCoordinatorLeaveTheLoraBitwiseUnchanged) {
  const char* env = std::getenv("BATON_KILL_LOOP_SEED");
  const uint64_t seed = env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device{}();
  std::printf("kill loop seed: %llu (rerun with BATON_KILL_LOOP_SEED=%llu)\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto uniform_ms = [&](int lo, int hi) {
    return std::chrono::milliseconds(std::uniform_int_distribution<int>(lo, hi)(rng));
  };

  const std::string ref = reference_ = JoinPath(dir_, "reference");
  ASSERT_EQ(Wait(StartCoordinator(ref, JoinPath(dir_, "reference.log"))), 0)
      << ReadFile(JoinPath(dir_, "reference.log")).value_or("");

  const std::string out = JoinPath(dir_, "killed");
  constexpr int kWorkerKills = 10, kCoordinatorKills = 3;
  int worker_kills = 0, coordinator_kills = 0, run = 0;
  std::string log = JoinPath(dir_, "coordinator0.log");
  pid_t coordinator = StartCoordinator(out, log);
  ASSERT_GT(coordinator, 0);
  // The first coordinator kill: during start-up, before any step or checkpoint.
  std::this_thread::sleep_for(uniform_ms(200, 1500));
  ::kill(coordinator, SIGKILL);
  Wait(coordinator);
  ++coordinator_kills;
  size_t seen_from = 0;
  auto restart = [&] {
    log = JoinPath(dir_, absl::StrCat("coordinator", ++run, ".log"));
    coordinator = StartCoordinator(out, log);
    seen_from = 0;
  };
  restart();
  const auto deadline = Clock::now() + std::chrono::seconds(150);
  int exit_code = -1;
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(coordinator, &status, WNOHANG) == coordinator) {
      exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    const bool more = worker_kills < kWorkerKills || coordinator_kills < kCoordinatorKills;
    // Kill only once a step has completed since the last kill or start: the previous recovery is over.
    if (!more || StepLines(log, seen_from) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    // A random point of the next step or its checkpoint write (a tiny step takes ~50-100 ms on 2 cores; 100 steps
    // leave room for the ≥ 13 kills, each costing a redone step and the one that must complete before the next).
    std::this_thread::sleep_for(uniform_ms(0, 100));
    const bool kill_coordinator = coordinator_kills < kCoordinatorKills &&
                                  (worker_kills >= kWorkerKills || std::uniform_int_distribution<int>(0, 4)(rng) == 0);
    if (kill_coordinator) {
      ::kill(coordinator, SIGKILL);
      Wait(coordinator);
      ++coordinator_kills;
      restart();
      continue;
    }
    std::vector<pid_t> workers = StageWorkersOf(coordinator);
    if (workers.empty()) continue;
    const pid_t victim = workers[std::uniform_int_distribution<size_t>(0, workers.size() - 1)(rng)];
    seen_from = FileSize(log);
    if (::kill(victim, SIGKILL) == 0) ++worker_kills;
  }
  if (exit_code < 0) ::kill(coordinator, SIGKILL);
  int rollbacks = 0, rolled_back = 0, taken_back = 0;
  for (int i = 0; i <= run; ++i) {
    rolled_back += StepsRolledBack(JoinPath(dir_, absl::StrCat("coordinator", i, ".log")), &rollbacks, &taken_back);
  }
  std::printf(
      "kill loop: %d stage worker kills, %d coordinator kills, %d coordinator runs; host copies %s: %d stage(s) took "
      "their state back from them, %d rollback(s) redid %d completed step(s) (%.2f a stage worker kill, besides the "
      "step each was in)\n",
      worker_kills, coordinator_kills, run + 1, HostCopies() ? "on" : "off", taken_back, rollbacks, rolled_back,
      worker_kills > 0 ? static_cast<double>(rolled_back) / worker_kills : 0.0);
  ASSERT_EQ(exit_code, 0) << "the last coordinator (" << log << "):\n" << ReadFile(log).value_or("");
  EXPECT_GE(worker_kills, kWorkerKills) << "the run finished before the loop could kill enough workers";
  EXPECT_EQ(coordinator_kills, kCoordinatorKills);
  if (HostCopies()) {
    // A kill between two stages' updates of one step leaves their copies a step apart: that one rolls back. The
    // others cost the step they were in.
    EXPECT_GE(taken_back, 1);
    EXPECT_LE(rolled_back, worker_kills) << "more than one step a kill on average besides the step each was in";
  }

  auto a = LoadAllSafetensors(JoinPath(ref, "lora.safetensors"));
  auto b = LoadAllSafetensors(JoinPath(out, "lora.safetensors"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  ASSERT_EQ(a->size(), b->size());
  for (const auto& [name, t] : *a) {
    ASSERT_TRUE(b->count(name)) << name;
    EXPECT_TRUE(at::equal(t, b->at(name))) << name << " differs from the uninterrupted run (seed " << seed << ")";
  }
}

}  // namespace
}  // namespace baton
