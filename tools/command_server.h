// `baton command-server`: baton commands read from stdin and run one after another in this one process, so a caller
// that runs hundreds of short commands (the upstream referees, tests/upstream/referee.py) pays the process start and
// libtorch's load once instead of per command. Each request is one JSON line {"args": ["forward", ...], "stdout":
// FILE, "stderr": FILE}: the command runs as `baton ARGS` would (RunTool), its output going to the two files, and
// the answer is one line {"rc": N} on stdout. It ends at the end of stdin. A command that crashes the process ends
// it (the caller sees stdout close and starts another).
#pragma once

#include "client/commands.h"

namespace baton {

Command CommandServerCommand();

}  // namespace baton
