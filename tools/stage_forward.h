// The part of `baton forward` every model family shares (commands.cc for FLUX.2, wan_forward.cc for Wan): the
// full-range stage with --lora attached, run once on the shell's outputs, its "output" written to --output.
#pragma once

#include <absl/status/status.h>
#include <absl/strings/string_view.h>

#include "client/args.h"
#include "core/model/model_family.h"

namespace baton {

// Attaches the adapters of --lora (when given) to `stage` at --lora-scale and says how many it applied.
absl::Status AttachLoraFromArgs(const Args& args, StageModel& stage);

// Runs `stage` without a graph on `shell_out` (its constants and tables together), writes "output" to --output and
// prints its shape and --dtype; `note` ends that line.
absl::Status ForwardAndWriteOutput(const Args& args, StageModel& stage, const ShellOutputs& shell_out,
                                   absl::string_view note);

}  // namespace baton
