// Whether a queued job may start beside the running ones on their stage workers: the frozen weights they hold (one
// key: stage_driver/configure_request.h's FrozenPipelineKey), one replica, and every job's memory on each stage within
// the smallest budget any of them sets. JobQueue::JoinBlockerLocked says what blocks a job in words.
#pragma once

#include <string>

#include "core/train/job.h"

namespace baton {

// What the job's stage workers would hold of the frozen weights, planned as the service would start it on `stages`
// workers (CheckJobPlan); "" when it cannot be planned yet (its dataset is an encoder worker's to build first): such a
// job runs alone. A job planned at submit has its key from the submit's check already.
std::string PlannedFrozenKey(const JobConfig& job, int stages);

}  // namespace baton
