// `baton scheduler-replay`: runs a pipeline's flow-matching scheduler (core/sample/unipc_scheduler.h) on given
// per-step model outputs and writes every intermediate sample, for the diffusers referee
// (tests/upstream/test_unipc.py). The scheduler is a pure function of its inputs, so no model is needed.
#pragma once

#include "client/commands.h"

namespace baton {

Command SchedulerReplayCommand();

}  // namespace baton
