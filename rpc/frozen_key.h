// The one key of a stage's frozen weights: what two pipelines must agree on to share one copy of them on a stage
// worker -- the model files, precision, 8-bit storage, device and every chunk's block range. The stage worker shares
// tensors by it (stage_worker/stage_tenants.h); the job service admits a job beside running ones by the key of its
// every stage (stage_driver/configure_request.h: FrozenPipelineKey), so what it admits is what the workers share.
#pragma once

#include <string>

#include "baton/v1/stage.pb.h"

namespace baton {

// Of the stage `request` configures; `default_device`: where a request that names no device computes (the worker's
// own --device; "" on the driver's side, where every stage of the same workers has the same default). Empty for a
// stage that swaps blocks (offload_blocks): it shares its weights with nothing.
std::string FrozenWeightsKey(const v1::ConfigureRequest& request, const std::string& default_device);

}  // namespace baton
