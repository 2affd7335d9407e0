#include "stage_driver/local_workers.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_split.h>
#include <absl/time/clock.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <regex>

#include "core/util/files.h"

namespace baton {
namespace {

// A fresh directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() : path_(JoinPath(::testing::TempDir(), "baton_lw_XXXXXX")) {
    EXPECT_NE(::mkdtemp(path_.data()), nullptr) << path_;
  }
  ~TempDir() { (void)RemoveAll(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes an executable /bin/sh script standing in for stage_worker. $DIR is the script's directory.
std::string WriteFakeWorker(const std::string& dir, const std::string& body) {
  std::string path = JoinPath(dir, "fake_worker.sh");
  EXPECT_TRUE(WriteFileAtomic(path, absl::StrCat("#!/bin/sh\nDIR=", dir, "\n", body, "\n")).ok());
  EXPECT_EQ(::chmod(path.c_str(), 0755), 0);
  return path;
}

// True once `pid` is gone or a zombie nobody has reaped yet (it no longer runs).
bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  auto stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return true;
  size_t paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z';
}

bool WaitUntil(const std::function<bool()>& pred, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

// Listens immediately and records its pid and arguments; `exec` keeps the pid the same for sleep.
constexpr char kHealthy[] = R"(echo "$@" > "$DIR/args.$$"
echo "LISTENING 127.0.0.1:12345"
exec sleep 30)";

TEST(LocalWorkersTest, StartsWorkersAndParsesAddresses) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, kHealthy);
  opts.threads = 3;
  opts.extra_args = {"--metrics_port", "0"};
  auto w = LocalWorkers::Start(3, opts);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->size(), 3);
  EXPECT_EQ((*w)->addresses(), std::vector<std::string>(3, "127.0.0.1:12345"));
  std::vector<pid_t> pids = (*w)->pids();
  ASSERT_EQ(pids.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE((*w)->Alive(i));
    EXPECT_EQ((*w)->Describe(i), absl::StrCat("running (pid ", pids[i], ")"));
    auto args = ReadFile(JoinPath(dir, absl::StrCat("args.", pids[i])));
    ASSERT_TRUE(args.ok()) << args.status();
    EXPECT_EQ(*args, "--listen 127.0.0.1:0 --threads 3 --device cpu --metrics_port 0\n");
  }
  EXPECT_NE(pids[0], pids[1]);
}

// A worker inherits no descriptor of the driving process but its output pipe and /dev/null: here one opened without
// O_CLOEXEC, as a library might, is not among the worker's.
TEST(LocalWorkersTest, WorkersInheritNoOtherDescriptors) {
  TempDir tmp;
  const std::string dir = tmp.path();
  const std::string held = JoinPath(dir, "held_open");
  ASSERT_TRUE(WriteFileAtomic(held, "x").ok());
  const int fd = ::open(held.c_str(), O_RDONLY);  // inheritable
  ASSERT_GE(fd, 0);
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, R"(ls -l /proc/$$/fd > "$DIR/fds"
echo "LISTENING 127.0.0.1:12345"
exec sleep 30)");
  auto w = LocalWorkers::Start(1, opts);
  ::close(fd);
  ASSERT_TRUE(w.ok()) << w.status();
  auto fds = ReadFile(JoinPath(dir, "fds"));
  ASSERT_TRUE(fds.ok()) << fds.status();
  EXPECT_EQ(fds->find("held_open"), std::string::npos) << *fds;
}

TEST(LocalWorkersTest, StopKillsChildren) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, kHealthy);
  auto w = LocalWorkers::Start(2, opts);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<pid_t> pids = (*w)->pids();
  for (pid_t pid : pids) ASSERT_EQ(::kill(pid, 0), 0);
  ASSERT_TRUE((*w)->Stop().ok());
  for (pid_t pid : pids) {
    EXPECT_EQ(::kill(pid, 0), -1) << pid;  // reaped, not just signalled
    EXPECT_EQ(errno, ESRCH);
  }
  EXPECT_FALSE((*w)->Alive(0));
  EXPECT_EQ((*w)->Describe(0), absl::StrCat("killed by signal ", SIGTERM, " (", strsignal(SIGTERM), ")"));
  EXPECT_TRUE((*w)->Stop().ok());  // idempotent
}

TEST(LocalWorkersTest, StopEscalatesToSigkillAfterGrace) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  // An ignored SIGTERM survives exec, so sleep ignores it too.
  opts.binary = WriteFakeWorker(dir, "trap '' TERM\necho LISTENING 127.0.0.1:1\nexec sleep 30");
  auto w = LocalWorkers::Start(1, opts);
  ASSERT_TRUE(w.ok()) << w.status();
  pid_t pid = (*w)->pids()[0];
  absl::Time start = absl::Now();
  ASSERT_TRUE((*w)->Stop(absl::Milliseconds(200)).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ((*w)->Describe(0), absl::StrCat("killed by signal ", SIGKILL, " (", strsignal(SIGKILL), ")"));
}

TEST(LocalWorkersTest, DestructorStopsChildren) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, kHealthy);
  std::vector<pid_t> pids;
  {
    auto w = LocalWorkers::Start(2, opts);
    ASSERT_TRUE(w.ok()) << w.status();
    pids = (*w)->pids();
  }
  for (pid_t pid : pids) EXPECT_EQ(::kill(pid, 0), -1) << pid;
}

TEST(LocalWorkersTest, EarlyExitReportsStatusAndLastOutput) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, "echo loading weights\necho 'fatal: no such checkpoint' >&2\nexit 3");
  auto w = LocalWorkers::Start(1, opts);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
  std::string msg(w.status().message());
  EXPECT_NE(msg.find("stage 0 exited with code 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find(opts.binary + " --listen 127.0.0.1:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("loading weights"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fatal: no such checkpoint"), std::string::npos) << msg;
}

TEST(LocalWorkersTest, OneFailingStageStopsTheOthers) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  // The first to create $DIR/first fails (after the others had time to start); the rest are healthy.
  opts.binary = WriteFakeWorker(dir, absl::StrCat("if mkdir \"$DIR/first\" 2>/dev/null; then\n"
                                                  "  sleep 0.3; echo 'cannot bind GPU'; exit 2\nfi\n"
                                                  "echo $$ >> \"$DIR/healthy\"\n",
                                                  kHealthy));
  auto w = LocalWorkers::Start(3, opts);
  ASSERT_FALSE(w.ok());
  std::string msg(w.status().message());
  EXPECT_TRUE(std::regex_search(msg, std::regex("stage [0-2] exited with code 2"))) << msg;
  EXPECT_NE(msg.find("cannot bind GPU"), std::string::npos) << msg;
  auto healthy = ReadFile(JoinPath(dir, "healthy"));
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  int checked = 0;
  for (absl::string_view line : absl::StrSplit(*healthy, '\n', absl::SkipEmpty())) {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(line, &pid)) << line;
    EXPECT_EQ(::kill(pid, 0), -1) << "healthy stage pid " << pid << " still exists";
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(LocalWorkersTest, NeverListeningTimesOut) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, "echo still loading\nexec sleep 30");
  opts.start_timeout = absl::Milliseconds(300);
  absl::Time start = absl::Now();
  auto w = LocalWorkers::Start(1, opts);
  absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDeadlineExceeded);
  std::string msg(w.status().message());
  EXPECT_NE(msg.find("stage 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("still loading"), std::string::npos) << msg;
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(LocalWorkersTest, MalformedListeningLineIsAnError) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, "echo LISTENING somewhere\nexec sleep 30");
  auto w = LocalWorkers::Start(1, opts);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("LISTENING somewhere"), std::string::npos) << w.status();
}

TEST(LocalWorkersTest, MissingBinaryIsAnError) {
  TempDir tmp;
  LocalWorkerOptions opts;
  opts.binary = JoinPath(tmp.path(), "no_such_worker");
  auto w = LocalWorkers::Start(1, opts);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(w.status().message().find(opts.binary), std::string::npos) << w.status();
}

TEST(LocalWorkersTest, KillMakesAStageDead) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, kHealthy);
  auto w = LocalWorkers::Start(2, opts);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Kill(1, SIGKILL).ok());
  EXPECT_TRUE(WaitUntil([&] { return !(*w)->Alive(1); }, absl::Seconds(2)));
  EXPECT_TRUE((*w)->Alive(0));
  EXPECT_NE((*w)->Describe(1).find("killed by signal 9"), std::string::npos) << (*w)->Describe(1);
  EXPECT_EQ((*w)->Kill(1, SIGKILL).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->Kill(5, SIGKILL).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE((*w)->Stop().ok());
}

TEST(LocalWorkersTest, ForwardsOutputWithStagePrefix) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir,
                                "echo 'hello from stderr' >&2\necho LISTENING 127.0.0.1:7\n"
                                "echo 'after listening'\ntouch \"$DIR/done\"\nexec sleep 30");
  ::testing::internal::CaptureStderr();
  {
    auto w = LocalWorkers::Start(1, opts);
    ASSERT_TRUE(w.ok()) << w.status();
    // Once `done` exists the last line is in the pipe; Stop drains each child's output before returning.
    EXPECT_TRUE(WaitUntil([&] { return PathExists(JoinPath(dir, "done")); }, absl::Seconds(2)));
    EXPECT_TRUE((*w)->Stop().ok());
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[stage 0] hello from stderr\n"), std::string::npos) << err;
  EXPECT_NE(err.find("[stage 0] after listening\n"), std::string::npos) << err;
}

TEST(LocalWorkersTest, ChildrenDieWithTheCoordinator) {
  TempDir tmp;
  const std::string dir = tmp.path();
  LocalWorkerOptions opts;
  opts.binary = WriteFakeWorker(dir, kHealthy);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t driver = ::fork();
  ASSERT_GE(driver, 0);
  if (driver == 0) {  // a stand-in driving process that dies without stopping its workers
    ::close(fds[0]);
    auto w = LocalWorkers::Start(1, opts);
    pid_t pid = w.ok() ? (*w)->pids()[0] : -1;
    ssize_t ignored = ::write(fds[1], &pid, sizeof(pid));
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t worker = -1;
  ASSERT_EQ(::read(fds[0], &worker, sizeof(worker)), static_cast<ssize_t>(sizeof(worker)));
  ::close(fds[0]);
  ASSERT_GT(worker, 0);
  int status;
  ASSERT_EQ(::waitpid(driver, &status, 0), driver);
  EXPECT_TRUE(WaitUntil([&] { return ProcessGone(worker); }, absl::Seconds(2))) << "worker " << worker;
}

}  // namespace
}  // namespace baton
