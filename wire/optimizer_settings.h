// The job's optimizer (core/train/job.h OptimizerConfig: the update rule, LoRA+, the EMA) as the coordinator sends it
// to every stage with JoinGroup (stage.proto OptimizerSettings), and back: one codec for both ends.
#pragma once

#include "baton/v1/stage.pb.h"
#include "core/train/job.h"
#include "core/train/prodigy.h"

namespace baton {

v1::OptimizerSettings OptimizerSettingsOf(const OptimizerConfig& config);
// Unset fields read as the proto's zeros, except an empty type ("adamw") and plus_ratio 0 (1: plain LoRA).
OptimizerConfig OptimizerConfigOf(const v1::OptimizerSettings& settings);
// Prodigy's scalars (its step size d and companions) as an estimate reports them and an update carries them.
v1::ProdigyScalars ProdigyScalarsProto(const ProdigyScalars& s);
ProdigyScalars ProdigyScalarsOf(const v1::ProdigyScalars& s);

}  // namespace baton
