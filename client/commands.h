// The `baton` command line. `baton` itself links no libtorch: it runs the commands a user runs against a job service
// (submit, watch, list, ...), the browser view, certs and health here, and executes `baton-tools` (beside it) with
// the same arguments for the model tools (tools/tool_commands.h), as git runs its git-* programs. main.cc only
// dispatches.
#pragma once

#include <absl/status/status.h>

#include <functional>
#include <string>
#include <vector>

#include "client/args.h"

namespace baton {

struct Command {
  std::string name;
  std::string summary;
  std::vector<FlagSpec> flags;
  std::function<absl::Status(const Args&)> run;
};

// The commands `baton` runs in its own process (no libtorch).
const std::vector<Command>& ClientCommands();

// Runs `c` with `flags` (what follows the command's name); returns the exit code (0 ok, 1 failure, 2 usage error).
int RunCommand(const Command& c, const std::vector<std::string>& flags);

// The model tools' binary: `baton-tools` in the folder of this process' executable.
std::string ToolsBinary();

// Runs `baton <argv...>`; returns the process exit code (0 ok, 1 failure, 2 usage error). A model tool replaces this
// process by ToolsBinary() (execv); it returns only when that binary cannot be run (1, saying why).
int RunClient(const std::vector<std::string>& argv);

}  // namespace baton
