// Both binaries' commands together, as `baton --help` shows them: unique names, summaries, flags, one help group each.
#include "tools/tool_commands.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "client/command_groups.h"

namespace baton {
namespace {

// `baton`'s own commands, then the model tools'.
std::vector<Command> EveryCommand() {
  std::vector<Command> all = ClientCommands();
  all.insert(all.end(), ToolCommands().begin(), ToolCommands().end());
  return all;
}

TEST(ToolCommandsTest, EveryCommandHasAUniqueNameASummaryAndARun) {
  std::set<std::string> names;
  for (const Command& c : EveryCommand()) {
    EXPECT_TRUE(names.insert(c.name).second) << "two commands named " << c.name;
    EXPECT_FALSE(c.summary.empty()) << c.name;
    EXPECT_TRUE(c.run != nullptr) << c.name;
    std::set<std::string> flags;
    for (const FlagSpec& f : c.flags) {
      EXPECT_TRUE(flags.insert(f.name).second) << c.name << " declares --" << f.name << " twice";
      EXPECT_FALSE(f.help.empty()) << c.name << " --" << f.name;
      EXPECT_FALSE(f.required && !f.default_value.empty()) << c.name << " --" << f.name << ": required with a default";
    }
  }
  for (const char* job_command : {"submit", "status", "list", "watch", "stop", "checkpoints", "download"}) {
    EXPECT_TRUE(names.count(job_command)) << job_command << " missing from ClientCommands()";
  }
}

// Every command sits in exactly one group of `baton --help`, and every name a group lists is a command.
TEST(ToolCommandsTest, EveryCommandIsInExactlyOneHelpGroup) {
  std::map<std::string, int> seen;
  for (const CommandGroup& group : CommandGroups()) {
    for (const std::string& name : group.names) ++seen[name];
  }
  std::set<std::string> names;
  std::map<std::string, std::string> summaries;
  for (const Command& c : EveryCommand()) {
    summaries[c.name] = c.summary;
    names.insert(c.name);
    EXPECT_EQ(seen[c.name], 1) << c.name << " is in " << seen[c.name] << " help groups";
  }
  for (const auto& [name, count] : seen) EXPECT_TRUE(names.count(name)) << name << " is no command";
  const std::string user = TopLevelUsage(summaries, /*all=*/false);
  const std::string all = TopLevelUsage(summaries, /*all=*/true);
  EXPECT_EQ(user.find("  forward "), std::string::npos) << user;
  EXPECT_NE(all.find("  forward "), std::string::npos) << all;
  EXPECT_NE(user.find("  submit "), std::string::npos) << user;
}

}  // namespace
}  // namespace baton
