// Configure's validation: everything a ConfigureRequest says -- ids, stage and chunk ranges, dtype, device, wire
// format, quantization, LoRA spec, neighbour addresses and the model files -- is checked, and the model opened
// (memory-mapped, headers only), before the worker lets go of the job it runs. A bogus Configure therefore fails
// without touching the running job (issue 10). The model is read only from regular files inside the worker's
// --model_root (symlinks resolved), with bounded reads: config.json ≤ 1 MiB, safetensors headers ≤ 100 MB.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>

#include <memory>
#include <string>
#include <vector>

#include "baton/v1/stage.pb.h"
#include "core/lora/lora.h"
#include "core/model/model_family.h"
#include "core/quant/weight_quant.h"
#include "wire/wire_compression.h"

namespace baton {

// A checked request, ready to build.
struct PreparedStage {
  at::ScalarType dtype = at::kFloat;
  at::Device device{at::kCPU};
  WireDtype wire = WireDtype::kNone;
  WeightQuant quant = WeightQuant::kNone;
  std::unique_ptr<ModelFamily> model;  // its family, config and memory-mapped weights
  std::vector<StageRange> ranges;      // [chunk]
  LoraSpec lora;
};

// Checks `req` and opens its model; INVALID_ARGUMENT / OUT_OF_RANGE / PERMISSION_DENIED / NOT_FOUND naming the
// field. `model_root`: the directory the model must lie in (empty = the working directory); `default_device`: the
// worker's --device, used when the request names none.
absl::StatusOr<PreparedStage> PrepareConfigure(const v1::ConfigureRequest& req, const std::string& model_root,
                                               const std::string& default_device);

// "host:port" with a port in 1..65535 (host may be a [v6] literal); INVALID_ARGUMENT naming `field` otherwise.
absl::Status CheckPeerAddress(const std::string& address, absl::string_view field);

}  // namespace baton
