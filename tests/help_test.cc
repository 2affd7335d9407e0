// `--help` of every binary, run as a user runs it: it lists each of the binary's own flags with its default
// and meaning (Abseil 20220623 printed "No flags matched." for binaries whose flags live in main.cc), and
// none of Abseil's own. `baton --help` lists the user's commands, `baton help --all` every one.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>

#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/util/files.h"
#include "tools/tool_commands.h"

namespace baton {
namespace {

// Flag name → default as --help prints them ("--stages (number of pipeline stages); default: 2;"). Abseil
// wraps long help text, so whitespace runs are folded first.
std::map<std::string, std::string> ListedFlags(const std::string& help) {
  std::string flat = std::regex_replace(help, std::regex("\\s+"), " ");
  std::map<std::string, std::string> flags;
  std::regex entry(" --?([a-z_0-9]+) \\((.*?)\\); default: (.*?);");
  for (std::sregex_iterator it(flat.begin(), flat.end(), entry), end; it != end; ++it) {
    flags[(*it)[1]] = (*it)[3];
  }
  return flags;
}

void ExpectHelpLists(const std::string& binary, const std::map<std::string, std::string>& expected) {
  auto result = test_util::RunCommand(JoinPath(test_util::BinDir(), binary) + " --help", /*with_stderr=*/true);
  SCOPED_TRACE(binary + " --help:\n" + result.output);
  EXPECT_EQ(result.output.find("No flags matched"), std::string::npos);
  EXPECT_NE(result.output.find(binary + " --"), std::string::npos) << "no usage line";
  const auto listed = ListedFlags(result.output);
  for (const auto& [name, default_value] : expected) {
    auto it = listed.find(name);
    ASSERT_NE(it, listed.end()) << "--" << name << " is not listed";
    EXPECT_EQ(it->second, default_value) << "--" << name;
  }
  for (const char* abseil_flag : {"flagfile", "fromenv", "tryfromenv", "undefok", "helpfull"}) {
    EXPECT_EQ(listed.count(abseil_flag), 0u) << "Abseil's own --" << abseil_flag << " belongs to --helpfull";
  }
}

TEST(HelpTest, CoordinatorListsItsFlagsWithDefaults) {
  ExpectHelpLists("coordinator", {{"stages", "2"},
                                  {"job", "\"\""},
                                  {"workers", "\"\""},
                                  {"steps", "0"},
                                  {"output", "\"out/run\""},
                                  {"resume", "false"},
                                  {"rpc_timeout_s", "300"},
                                  {"connect_timeout_s", "20"},
                                  {"stage_worker", "\"\""},
                                  {"token_file", "\"\""},
                                  {"tls_dir", "\"\""},
                                  {"insecure", "false"}});
}

TEST(HelpTest, StageWorkerListsItsFlagsWithDefaults) {
  ExpectHelpLists("stage_worker", {{"listen", "\"127.0.0.1:0\""},
                                   {"device", "\"cpu\""},
                                   {"threads", "1"},
                                   {"wait_timeout_s", "300"},
                                   {"tls_dir", "\"\""},
                                   {"tls_ca", "\"\""},
                                   {"tls_cert", "\"\""},
                                   {"tls_key", "\"\""},
                                   {"insecure", "false"}});
}

TEST(HelpTest, EncoderWorkerListsItsFlagsWithDefaults) {
  ExpectHelpLists("encoder_worker", {{"dataset", "\"\""},
                                     {"cache", "\"\""},
                                     {"model", "\"\""},
                                     {"threads", "0"},
                                     {"trigger", "\"\""},
                                     {"resolution", "\"1024\""},
                                     {"max_sequence_length", "512"},
                                     {"max_frames", "81"},
                                     {"frame_stride", "1"},
                                     {"frames", "\"\""},
                                     {"frame_extraction", "\"head\""},
                                     {"clips_per_video", "0"},
                                     {"slide_stride", "1"},
                                     {"dtype", "\"fp32\""},
                                     {"listen", "\"\""},
                                     {"shard", "\"\""},
                                     {"follow_links_into", ""},
                                     {"control", "\"\""}});
}

// `baton --help` lists what a user runs, in groups; `baton help --all` adds the low-level tools.
TEST(HelpTest, BatonListsTheUsersCommandsAndHelpAllEveryCommand) {
  auto result = test_util::RunCommand(JoinPath(test_util::BinDir(), "baton") + " --help", /*with_stderr=*/true);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  auto all = test_util::RunCommand(JoinPath(test_util::BinDir(), "baton") + " help --all", /*with_stderr=*/true);
  EXPECT_EQ(all.exit_code, 0) << all.output;
  std::vector<Command> commands = ClientCommands();
  commands.insert(commands.end(), ToolCommands().begin(), ToolCommands().end());
  for (const Command& c : commands) {  // baton's own, and baton-tools' with their summaries
    EXPECT_NE(all.output.find("  " + c.name + " "), std::string::npos) << c.name << " missing from:\n" << all.output;
    EXPECT_NE(all.output.find(c.summary.substr(0, 40)), std::string::npos) << c.name << "\n" << all.output;
  }
  for (const char* user : {"submit", "watch", "list", "status", "stop", "continue", "download", "ui", "sample", "plan",
                           "lora-convert", "certs"}) {
    EXPECT_NE(result.output.find(std::string("  ") + user + " "), std::string::npos) << user << "\n" << result.output;
  }
  for (const char* tool :
       {"forward", "step-grads", "tokenize", "scheduler-replay", "sample-timesteps", "decode-image"}) {
    EXPECT_EQ(result.output.find(std::string("  ") + tool + " "), std::string::npos) << tool << "\n" << result.output;
  }
  EXPECT_NE(result.output.find("baton help --all"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("  health "), std::string::npos);
  auto health = test_util::RunCommand(JoinPath(test_util::BinDir(), "baton") + " health --help", true);
  EXPECT_EQ(health.exit_code, 0);
  EXPECT_NE(health.output.find("usage: baton health ADDRESS [flags]"), std::string::npos) << health.output;
  EXPECT_NE(health.output.find("--service VALUE"), std::string::npos) << health.output;
}

// stage_worker refuses values it cannot serve with, before it listens: exit 1 and the flag named.
TEST(HelpTest, StageWorkerRefusesUnusableValuesNamingTheFlag) {
  const std::string bin = JoinPath(test_util::BinDir(), "stage_worker") + " --insecure --listen=127.0.0.1:0";
  const std::map<std::string, std::string> refused = {
      {" --inbox_bytes=1000", "stage_worker: --inbox_bytes must be at least 1 MiB"},
      {" --send_queue_bytes=1000", "stage_worker: --send_queue_bytes must be at least 1 MiB"},
      {" --model_root=/nonexistent/baton", "stage_worker: --model_root /nonexistent/baton is not a directory"},
      {" --device=tpu", "stage_worker: "},
  };
  for (const auto& [args, message] : refused) {
    auto result = test_util::RunCommand(bin + args, /*with_stderr=*/true);
    EXPECT_EQ(result.exit_code, 1) << args << ": " << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << args << ": " << result.output;
    EXPECT_EQ(result.output.find("LISTENING"), std::string::npos) << args;
  }
}

}  // namespace
}  // namespace baton
