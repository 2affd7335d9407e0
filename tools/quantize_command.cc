#include "tools/quantize_command.h"

#include <absl/strings/str_cat.h>

#include <chrono>
#include <cstdio>

#include "core/device/threads.h"
#include "core/model/flux2_weights.h"
#include "core/model/quantize_checkpoint.h"
#include "core/util/status.h"

namespace baton {
namespace {

absl::Status Quantize(const Args& args) {
  SetComputeThreads(1);
  ASSIGN_OR_RETURN(WeightQuant quant, ParseWeightQuant(args.Get("quantize")));
  if (quant == WeightQuant::kNone) return absl::InvalidArgumentError("--quantize must be int8 or fp8");
  ASSIGN_OR_RETURN(int64_t shard_mb, args.GetInt("shard-mb"));
  ASSIGN_OR_RETURN(auto ckpt, Flux2Checkpoint::Open(args.Get("model"), args.Get("config")));
  QuantizeCheckpointOptions options;
  options.quant = quant;
  options.max_shard_bytes = shard_mb < 0 ? -1 : shard_mb << 20;
  options.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(WriteQuantizedFlux2Checkpoint(*ckpt, args.Get("out"), options));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %s FLUX.2 transformer (diffusers layout) in %.1f s\n", args.Get("out").c_str(),
              WeightQuantName(quant).c_str(), seconds);
  return absl::OkStatus();
}

}  // namespace

Command QuantizeCommand() {
  return {"quantize",
          "Write a pre-quantized FLUX.2 transformer: the blocks' Linear weights in int8 or fp8 with per-row scales.",
          {{"model", "diffusers transformer/pipeline folder or BFL .safetensors", "", true},
           {"out", "output folder (config.json + safetensors)", "", true},
           {"quantize", "int8 | fp8", "", true},
           {"config", "config.json for a BFL single file"},
           {"shard-mb", "MiB per output shard: -1 = like the input (its largest file), 0 = one file", "-1"}},
          Quantize};
}

}  // namespace baton
