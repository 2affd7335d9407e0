// `baton` without libtorch (issue 45): the job commands and the browser view load none of it, so they start at once
// and the view idles small; the model tools still answer through `baton`, which executes baton-tools for them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "core/testing/paths.h"
#include "core/testing/prometheus_scrape.h"
#include "core/testing/run_command.h"
#include "core/testing/spawn.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::RunCommand;

// The shared libraries `binary` names (readelf's NEEDED entries), one per line.
std::string LightClientNeeded(const std::string& binary) {
  return RunCommand("readelf -d " + binary + " | grep NEEDED", /*with_stderr=*/true).output;
}

// A /proc/PID/status field in kB ("VmRSS"), or -1.
int64_t LightClientStatusKb(pid_t pid, const std::string& field) {
  std::smatch m;
  const std::string status = ReadFile(absl::StrCat("/proc/", pid, "/status")).value_or("");
  if (!std::regex_search(status, m, std::regex(field + ":\\s+([0-9]+) kB"))) return -1;
  return std::stoll(m[1].str());
}

TEST(LightClientTest, BatonLinksNoLibtorchAndBatonToolsDoes) {
  const std::string baton = LightClientNeeded(JoinPath(BinDir(), "baton"));
  ASSERT_NE(baton.find("libgrpc++"), std::string::npos) << baton;  // readelf answered
  EXPECT_EQ(baton.find("libtorch"), std::string::npos) << baton;
  EXPECT_EQ(baton.find("libc10"), std::string::npos) << baton;
  EXPECT_NE(LightClientNeeded(JoinPath(BinDir(), "baton-tools")).find("libtorch"), std::string::npos);
}

// A model tool through `baton`: the same flags, output and exit codes as before the split.
TEST(LightClientTest, ModelToolsRunThroughBaton) {
  auto help = RunCommand(JoinPath(BinDir(), "baton") + " plan --help", /*with_stderr=*/true);
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("usage: baton plan [flags]"), std::string::npos) << help.output;
  auto bad = RunCommand(JoinPath(BinDir(), "baton") + " plan --no-such-flag", /*with_stderr=*/true);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("baton plan: unknown flag --no-such-flag"), std::string::npos) << bad.output;
  auto version = RunCommand(JoinPath(BinDir(), "baton") + " --version", /*with_stderr=*/true);
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_NE(version.output.find("baton-tools: libtorch "), std::string::npos) << version.output;
}

// The browser view, having served its sign-in page, holds no libtorch mapping and under 50 MB resident.
TEST(LightClientTest, TheBrowserViewIdlesWithoutLibtorchUnder50MB) {
  const std::string dir = MakePrivateTempDir("baton-light-ui-").value();
  const std::string token = JoinPath(dir, "token"), log = JoinPath(dir, "ui.log");
  ASSERT_TRUE(WriteFileAtomic(token, "light-client-token\n").ok());
  const pid_t ui = test_util::SpawnLogged({JoinPath(BinDir(), "baton"), "ui", "--server", "127.0.0.1:1", "--insecure",
                                           "--token-file", token, "--listen", "127.0.0.1:0"},
                                          log);
  ASSERT_GT(ui, 0);
  std::smatch m;
  std::string text;
  for (int i = 0; i < 200 && !std::regex_search(text, m, std::regex("serving http://(\\S+)/ ")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    text = ReadFile(log).value_or("");
  }
  ASSERT_FALSE(m.empty()) << text;
  auto page = test_util::HttpGet(m[1].str(), "/login");  // the sign-in page ("/" redirects there)
  EXPECT_TRUE(page.ok()) << page.status();
  const std::string maps = ReadFile(absl::StrCat("/proc/", ui, "/maps")).value_or("");
  const int64_t rss_kb = LightClientStatusKb(ui, "VmRSS");
  ::kill(ui, SIGTERM);
  int status = 0;
  ::waitpid(ui, &status, 0);
  EXPECT_FALSE(maps.empty());
  EXPECT_EQ(maps.find("libtorch"), std::string::npos);
  EXPECT_GT(rss_kb, 0);
  EXPECT_LT(rss_kb, 50 << 10) << "baton ui resident: " << rss_kb << " kB";
  (void)RemoveAll(dir);
}

}  // namespace
}  // namespace baton
