// `baton health ADDRESS [--service NAME]`: one grpc.health.v1 Check against a Baton server; exit 0 when it
// answers SERVING, 1 otherwise (unreachable, NOT_SERVING, unknown service). Made for Docker healthchecks.
#pragma once

#include "client/commands.h"

namespace baton {

Command HealthCommand();

}  // namespace baton
