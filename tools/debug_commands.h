// `baton` debug commands that expose one piece of core/ to the upstream referees (tests/upstream/):
// decode-image (the training image decoder, EXIF orientation included), sample-timesteps (a job's
// timestep sampler), lr-schedule (a job's learning rates). They print nothing a training run needs.
#pragma once

#include "client/commands.h"

namespace baton {

Command DecodeImageCommand();
Command SampleTimestepsCommand();
Command LearningRateScheduleCommand();
Command OptimizerReplayCommand();

}  // namespace baton
