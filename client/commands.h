// The `baton` client's subcommands. Each is a function from parsed flags to a status; main.cc only
// dispatches. Commands that talk to a coordinator's job service are in job_commands.h.
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

const std::vector<Command>& AllCommands();

// Runs `baton <argv...>`; returns the process exit code (0 ok, 1 failure, 2 usage error).
int RunClient(const std::vector<std::string>& argv);

}  // namespace baton
