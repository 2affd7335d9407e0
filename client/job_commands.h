// `baton submit|status|list|watch|stop|checkpoints|download`: the client of a coordinator's job service
// (`coordinator --listen`). Every command takes --coordinator HOST:PORT (default $BATON_COORDINATOR, else
// 127.0.0.1:7070).
#pragma once

#include <vector>

#include "client/commands.h"

namespace baton {

std::vector<Command> JobCommands();

}  // namespace baton
