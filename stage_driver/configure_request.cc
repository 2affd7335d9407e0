#include "stage_driver/configure_request.h"

#include <absl/strings/str_cat.h>

#include "rpc/frozen_key.h"

namespace baton {

v1::ConfigureRequest ConfigureRequestFor(const PipelineSpec& pipeline, const std::vector<StageSpec>& chunks, int i,
                                         const std::vector<std::string>& addresses, int replica, int first_worker) {
  const int p = static_cast<int>(addresses.size());
  const StageSpec& spec = chunks.front();
  v1::ConfigureRequest req;
  AddressTo(req, pipeline.id);
  req.set_job_name(pipeline.name);
  req.set_micro_batches(static_cast<int32_t>(pipeline.micro_batches));
  req.set_stage_index(i);
  req.set_replica(replica);
  req.set_num_stages(p);
  req.set_model_path(pipeline.model);
  req.set_model_config_path(pipeline.model_config);
  req.set_block_begin(static_cast<int32_t>(spec.block_begin));
  req.set_block_end(static_cast<int32_t>(spec.block_end));
  req.set_has_embedders(spec.has_embedders);
  req.set_has_head(spec.has_head);
  req.set_dtype(pipeline.dtype);
  // Without devices in the spec each worker computes on its own --device (local workers: cpu).
  // With replicas, `devices:` lists replica 0's stages, then replica 1's, ...
  const size_t device = static_cast<size_t>(first_worker) + static_cast<size_t>(i);
  if (device < pipeline.devices.size()) req.set_device(pipeline.devices[device]);
  // The planner's per-stage decision (recompute: auto decides from the budget; true = all, false = none).
  // Interleaved: every chunk of every worker got the same all-or-nothing decision (PlanStages).
  req.set_recompute(spec.recompute_blocks > 0);
  if (chunks.size() == 1) req.set_recompute_blocks(static_cast<int32_t>(spec.recompute_blocks));
  req.set_offload_blocks(static_cast<int32_t>(spec.offload_blocks));
  req.set_quantize(pipeline.quantize);
  req.mutable_lora()->set_rank(static_cast<int32_t>(pipeline.lora.rank));
  req.mutable_lora()->set_alpha(static_cast<float>(pipeline.lora.alpha));
  for (const auto& t : pipeline.lora.targets) req.mutable_lora()->add_targets(t);
  req.mutable_lora()->set_dropout(static_cast<float>(pipeline.lora.dropout));
  req.mutable_lora()->set_dtype(pipeline.lora_dtype);
  req.mutable_lora()->set_type(AdapterTypeName(pipeline.lora.type));
  req.mutable_lora()->set_lokr_factor(static_cast<int32_t>(pipeline.lora.lokr_factor));
  if (i + 1 < p) req.set_next_address(addresses[i + 1]);
  if (i > 0) req.set_prev_address(addresses[i - 1]);
  if (chunks.size() > 1) {
    for (const StageSpec& c : chunks) {
      v1::StageChunk* ch = req.add_chunks();
      ch->set_block_begin(static_cast<int32_t>(c.block_begin));
      ch->set_block_end(static_cast<int32_t>(c.block_end));
      ch->set_has_embedders(c.has_embedders);
      ch->set_has_head(c.has_head);
    }
    req.set_next_address(addresses[(i + 1) % p]);
    req.set_prev_address(addresses[(i + p - 1) % p]);
  }
  req.set_threads(pipeline.threads);
  req.set_allow_nondeterministic(!pipeline.deterministic);
  req.set_seed(pipeline.seed);
  req.set_wire_dtype(pipeline.wire_dtype);
  return req;
}

std::string FrozenPipelineKey(const PipelineSpec& pipeline, const std::vector<std::vector<StageSpec>>& plan) {
  const std::vector<std::string> addresses(plan.size());  // addresses do not decide the weights
  std::string key;
  for (size_t i = 0; i < plan.size(); ++i) {
    const v1::ConfigureRequest req =
        ConfigureRequestFor(pipeline, plan[i], static_cast<int>(i), addresses, /*replica=*/0, /*first_worker=*/0);
    const std::string stage = FrozenWeightsKey(req, "");
    if (stage.empty()) return "";  // a stage that shares nothing: the pipeline runs alone
    absl::StrAppend(&key, i == 0 ? "" : ";", stage);
  }
  return key;
}

}  // namespace baton
