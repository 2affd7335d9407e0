#include "client/commands.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "client/command_groups.h"
#include "client/job_commands.h"

namespace baton {
namespace {

const FlagSpec* FindFlag(const Command& c, const std::string& name) {
  for (const FlagSpec& f : c.flags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(CommandsTest, JobCommandsTakeTheCoordinatorAndTheSecurityFlags) {
  const char* saved = std::getenv("BATON_COORDINATOR");
  const std::string restore = saved != nullptr ? saved : "";
  unsetenv("BATON_COORDINATOR");
  const std::vector<Command> plain = JobCommands();
  setenv("BATON_COORDINATOR", "10.0.0.5:9000", 1);
  const std::vector<Command> from_env = JobCommands();
  if (saved != nullptr) {
    setenv("BATON_COORDINATOR", restore.c_str(), 1);
  } else {
    unsetenv("BATON_COORDINATOR");
  }
  ASSERT_EQ(plain.size(), from_env.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    const FlagSpec* coordinator = FindFlag(plain[i], "coordinator");
    ASSERT_NE(coordinator, nullptr) << plain[i].name;
    EXPECT_EQ(coordinator->default_value, "127.0.0.1:7070") << plain[i].name;
    EXPECT_EQ(FindFlag(from_env[i], "coordinator")->default_value, "10.0.0.5:9000") << from_env[i].name;
    for (const char* security : {"tls-dir", "token-file", "insecure"}) {
      EXPECT_NE(FindFlag(plain[i], security), nullptr) << plain[i].name << " lacks --" << security;
    }
  }
}

// Exit codes without a server: 2 for a usage error, 0 for help, 1 for a command that fails.
TEST(CommandsTest, RunClientExitCodes) {
  testing::internal::CaptureStderr();
  const int none = RunClient({});
  const int unknown = RunClient({"trian-local"});
  const int bad_flag = RunClient({"stop", "--no-such-flag"});
  const int missing = RunClient({"stop"});
  const int missing_file = RunClient({"submit", "/nonexistent/baton_job.yaml", "--insecure"});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(none, 2);
  EXPECT_EQ(unknown, 2);
  EXPECT_NE(err.find("baton: unknown command 'trian-local'"), std::string::npos) << err;
  EXPECT_EQ(bad_flag, 2);
  EXPECT_NE(err.find("baton stop: unknown flag --no-such-flag\nusage: baton stop JOB_ID [flags]"), std::string::npos)
      << err;
  EXPECT_EQ(missing, 2);
  EXPECT_NE(err.find("baton stop: JOB_ID is required"), std::string::npos) << err;
  EXPECT_EQ(missing_file, 1) << "the job file is read before any connection";
  EXPECT_NE(err.find("/nonexistent/baton_job.yaml"), std::string::npos) << err;

  testing::internal::CaptureStdout();
  const int help = RunClient({"help"});
  const int command_help = RunClient({"download", "--help"});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(help, 0);
  EXPECT_EQ(command_help, 0);
  EXPECT_NE(out.find("usage: baton <command> [flags]"), std::string::npos) << out;
  EXPECT_NE(out.find("usage: baton download JOB_ID [flags]"), std::string::npos) << out;
  EXPECT_NE(out.find("--out VALUE  file to write (required)"), std::string::npos) << out;
}

}  // namespace
}  // namespace baton
