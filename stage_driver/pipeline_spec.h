// What the stage workers of one pipeline hold, whoever drives them (a training run, `baton sample`): the model, the
// frozen weights' precision, the adapters' shape, and how each stage computes. The driver configures every stage from
// it (StageSet); it knows nothing of jobs, datasets or optimizers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/lora/lora.h"

namespace baton {

struct PipelineSpec {
  // The id the stages know the pipeline by (every request and envelope carries it; a stage refuses another's), and
  // the name their logs and metrics show.
  std::string id, name;
  std::string model, model_config;  // a diffusers pipeline folder or single file, and its config
  std::string dtype = "fp32";       // the frozen weights' and activations' precision
  std::string quantize = "none";    // none | int8 | fp8: the frozen Linear weights
  LoraSpec lora;                    // rank, alpha, targets, dropout (its dtype: lora_dtype below)
  std::string lora_dtype = "fp32";  // the adapters' math: fp32 | the compute dtype
  std::string wire_dtype = "none";  // activations between stages: none (as computed) | bf16 | fp16
  int64_t micro_batches = 1;        // per step or pass
  // Per global worker (replica after replica): "cpu", "cuda", "cuda:1"; a worker past the list computes on its own
  // --device.
  std::vector<std::string> devices;
  int threads = 1;  // compute threads per stage
  bool deterministic = true;
  uint64_t seed = 0;  // the adapters' init and the dropout masks
};

// Names the pipeline a request or envelope is for: its id, which is also its configuration's hash (stage.proto's
// job_id and config_hash; the stage worker checks both). Per-step messages (StepPlan, Reduce, Update) carry the id
// alone.
template <typename Message>
void AddressTo(Message& message, const std::string& pipeline_id) {
  message.set_job_id(pipeline_id);
  message.set_config_hash(pipeline_id);
}

}  // namespace baton
