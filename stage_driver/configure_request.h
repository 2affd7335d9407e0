// What a stage worker is configured with, from the pipeline it belongs to and the planner's slice of it: the one
// place a PipelineSpec becomes ConfigureRequests, and so the one place a pipeline's frozen-weights key is made.
#pragma once

#include <string>
#include <vector>

#include "baton/v1/stage.pb.h"
#include "core/pipeline/partition.h"
#include "stage_driver/pipeline_spec.h"

namespace baton {

// Worker i's request (of `addresses`' workers); `chunks` holds its one block range, or its v chunks (interleaved: the
// neighbours wrap around, worker p-1's outputs feeding worker 0's next chunk). `first_worker`: the global index of
// the replica's stage 0 (its devices).
v1::ConfigureRequest ConfigureRequestFor(const PipelineSpec& pipeline, const std::vector<StageSpec>& chunks, int i,
                                         const std::vector<std::string>& addresses, int replica, int first_worker);

// What the stage workers of a pipeline cut by `plan` ([worker][chunk], replica 0's) hold of the frozen weights: every
// stage's FrozenWeightsKey (rpc/frozen_key.h), in stage order. Two pipelines share the workers' weights exactly when
// their keys are equal (the job service admits a job beside others by it).
std::string FrozenPipelineKey(const PipelineSpec& pipeline, const std::vector<std::vector<StageSpec>>& plan);

}  // namespace baton
