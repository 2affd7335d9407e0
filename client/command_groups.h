// `baton --help` for a user: the commands a user runs, in groups, and apart from them the low-level tools the
// upstream referee tests drive (as git keeps porcelain apart from plumbing; `baton help --all` lists those too).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace baton {

struct CommandGroup {
  std::string title;
  std::vector<std::string> names;  // in the order --help lists them
  bool plumbing = false;           // listed only by `baton help --all`
};

// Every command of ClientCommands() and of the model tools (tools/tool_commands.h) is in exactly one group
// (tests/help_test.cc holds it): the groups are also how `baton` knows a model tool's name before it runs baton-tools.
const std::vector<CommandGroup>& CommandGroups();

// The top-level usage text: the user's groups, and the plumbing too when `all`; `summaries` by command name.
std::string TopLevelUsage(const std::map<std::string, std::string>& summaries, bool all);

}  // namespace baton
