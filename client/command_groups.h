// `baton --help` for a user: the commands a user runs, in groups, and apart from them the low-level tools the
// upstream referee tests drive (as git keeps porcelain apart from plumbing; `baton help --all` lists those too).
#pragma once

#include <string>
#include <vector>

#include "client/commands.h"

namespace baton {

struct CommandGroup {
  std::string title;
  std::vector<std::string> names;  // in the order --help lists them
  bool plumbing = false;           // listed only by `baton help --all`
};

// Every command of AllCommands() is in exactly one group (client/commands_test.cc holds it).
const std::vector<CommandGroup>& CommandGroups();

// The top-level usage text: the user's groups, and the plumbing too when `all`.
std::string TopLevelUsage(const std::vector<Command>& commands, bool all);

}  // namespace baton
