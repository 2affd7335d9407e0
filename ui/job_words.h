// How a job's state and durations are said, the same in the terminal (`baton watch`) and in the browser view.
#pragma once

#include <string>

#include "baton/v1/job_service.pb.h"

namespace baton {

// "queued", "running", "finished", "failed", "stopped".
std::string JobStateName(v1::JobState state);
// "42s", "3m05s", "2h07m"; "-" when negative.
std::string FormatDuration(double seconds);

}  // namespace baton
