// The model tools: the `baton` commands that load models, train, sample, plan and convert (libtorch), and the
// low-level tools the upstream referee tests drive. They run in the `baton-tools` binary, which `baton` executes for
// them (client/commands.h), so that the job commands and the browser view start without libtorch.
#pragma once

#include <string>
#include <vector>

#include "client/commands.h"

namespace baton {

const std::vector<Command>& ToolCommands();

// Runs `baton-tools <argv...>` (argv[0]: the command, as `baton` passes it); returns the exit code (0 ok, 1 failure,
// 2 usage error). `--commands` alone prints each command's name and summary, one tab-separated line each.
int RunTool(const std::vector<std::string>& argv);

}  // namespace baton
