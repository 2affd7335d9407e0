// The ephemeral TLS folders a killed process leaves behind: the next process removes them, and nothing else.
#include "stage_driver/local_tls.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "core/util/files.h"
#include "rpc/tls.h"

namespace baton {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

class SweepStaleTlsDirsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "sweep-XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    tmp_ = templ;
  }

  // A folder as MakeEphemeralTls leaves it: the certificates, the key and the lock file (`lock`: whether it has one).
  std::string MakeDir(const std::string& name, bool lock = true, bool key = true) {
    const std::string dir = JoinPath(tmp_, name);
    EXPECT_EQ(::mkdir(dir.c_str(), 0700), 0);
    EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, kTlsCaFile), "ca").ok());
    EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, kTlsCertFile), "cert").ok());
    if (key) EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, kTlsKeyFile), "key").ok());
    if (lock) EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "lock"), "").ok());
    return dir;
  }

  std::string tmp_;
};

TEST_F(SweepStaleTlsDirsTest, AKilledOwnersFolderGoesAndALiveOnesStays) {
  const std::string dir = MakeDir("baton-tls-a1b2c3");
  // The owner: a process holding the lock as MakeEphemeralTls does, killed as the OOM killer would.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {  // only async-signal-safe calls in the child
    const int fd = ::open(JoinPath(dir, "lock").c_str(), O_RDWR);
    const char ok = fd >= 0 && ::flock(fd, LOCK_EX) == 0 ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    for (;;) ::pause();
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  EXPECT_EQ(SweepStaleTlsDirs(tmp_), 0);
  EXPECT_TRUE(Exists(JoinPath(dir, kTlsKeyFile))) << "a live owner's folder was removed";

  ASSERT_EQ(::kill(owner, SIGKILL), 0);
  ASSERT_EQ(::waitpid(owner, nullptr, 0), owner);
  EXPECT_TRUE(Exists(dir)) << "SIGKILL runs no destructor: the folder stays until someone sweeps it";
  EXPECT_EQ(SweepStaleTlsDirs(tmp_), 1);
  EXPECT_FALSE(Exists(dir));
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(SweepStaleTlsDirsTest, LeavesWhatItCannotProveStale) {
  const std::string held = MakeDir("baton-tls-held00");
  const int fd = ::open(JoinPath(held, "lock").c_str(), O_RDWR);  // this process is its owner
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const std::string old = MakeDir("baton-tls-old000", /*lock=*/false);            // from before the lock file
  const std::string starting = MakeDir("baton-tls-new000", true, /*key=*/false);  // locking, no key yet
  const std::string other = MakeDir("not-baton-000");
  const std::string stale = MakeDir("baton-tls-dead00");
  ASSERT_TRUE(WriteFileAtomic(JoinPath(tmp_, "baton-tls-file00"), "a file, not a folder").ok());

  EXPECT_EQ(SweepStaleTlsDirs(tmp_), 1);
  EXPECT_FALSE(Exists(stale));
  for (const std::string& kept : {held, old, starting, other, JoinPath(tmp_, "baton-tls-file00")}) {
    EXPECT_TRUE(Exists(kept)) << kept;
  }
  EXPECT_TRUE(Exists(JoinPath(held, kTlsKeyFile)));
  EXPECT_EQ(SweepStaleTlsDirs(JoinPath(tmp_, "missing")), 0);
  ::close(fd);
}

}  // namespace
}  // namespace baton
