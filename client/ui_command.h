// `baton ui --server HOST:PORT --listen 127.0.0.1:8675`: the browser view of a job service (ui/ui_server.h), a
// client of it like `baton watch`. It serves until SIGINT/SIGTERM.
#pragma once

#include "client/commands.h"

namespace baton {

Command UiCommand();

}  // namespace baton
