// The planner's view of a model (partition.h's PlanModel): FLUX.2 from its config alone, exactly as the planner has
// always sized it, and any family through ModelFamily's BlockPlanInfo.
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "core/model/flux2_model.h"
#include "core/model/model_family.h"
#include "core/pipeline/partition.h"
#include "core/util/status.h"

namespace baton {

namespace {

int64_t LargestQuantizedParam(const Flux2Config& config) {
  int64_t largest = 0;
  for (const auto& [name, shape] : Flux2ParameterShapes(config)) {
    if (!IsQuantizedFlux2Param(name, shape)) continue;
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    largest = std::max(largest, elements);
  }
  return largest;
}

// Inputs of the adapted linears per micro-batch, in the block kind that has the most. Double blocks: the image
// stream's to_q/k/v and to_out.0 read D per image token (all-linear adds the feed-forward, D and M, and the same
// on the text stream); single blocks: to_qkv_mlp_proj reads D and to_out D + M per token.
int64_t Flux2BlockLoraInput(const Flux2Config& config, const PartitionOptions& o) {
  const int64_t d = config.inner_dim(), m = config.mlp_hidden_dim();
  const int64_t t = o.tokens_per_micro_batch, t_txt = std::min(o.text_tokens_per_micro_batch, t), t_img = t - t_txt;
  const int64_t dbl = o.all_linear ? t * (5 * d + m) : t_img * 4 * d;
  const int64_t sgl = config.num_single_layers > 0 ? t * (2 * d + m) : 0;
  return std::max(config.num_layers > 0 ? dbl : 0, sgl);
}

// (Σ out x in of the adapted linears in the block that has the most, the largest adapted linear's out x in).
std::pair<int64_t, int64_t> Flux2AdaptedElements(const Flux2Config& config, bool all_linear) {
  const int64_t d = config.inner_dim(), m = config.mlp_hidden_dim();
  const int64_t dbl = config.num_layers == 0 ? 0 : all_linear ? 8 * d * d + 2 * (d * 2 * m + m * d) : 4 * d * d;
  const int64_t sgl = config.num_single_layers == 0 ? 0 : d * (3 * d + 2 * m) + (d + m) * d;
  int64_t largest = config.num_layers == 0 ? 0 : all_linear ? 2 * d * m : d * d;
  if (config.num_single_layers > 0) largest = std::max(largest, d * (3 * d + 2 * m));
  return {std::max(dbl, sgl), largest};
}

}  // namespace

PlanSource Flux2PlanSource(const Flux2Config& config) {
  return [config](const PartitionOptions& o) -> absl::StatusOr<PlanModel> {
    RETURN_IF_ERROR(config.Validate());
    PlanModel m;
    m.name = "FLUX.2";
    m.summary = absl::StrFormat("%d blocks (%d double, %d single)", config.num_blocks(), config.num_layers,
                                config.num_single_layers);
    m.hidden_size = config.inner_dim();
    m.frozen = ComputeFrozenSizes(config, o.quantize, o.bytes_per_param);
    const int64_t dbl = DoubleBlockLoraParams(config, o.lora_rank, o.all_linear, o.lora_type, o.lokr_factor);
    const int64_t sgl = SingleBlockLoraParams(config, o.lora_rank, o.all_linear, o.lora_type, o.lokr_factor);
    for (int64_t b = 0; b < config.num_blocks(); ++b) {
      m.block_lora.push_back(config.IsDoubleBlock(b) ? dbl : sgl);
      m.block_streams.push_back(config.IsDoubleBlock(b) ? 2 : 1);  // image and text streams, or the joined one
    }
    // Per token a double and a single block do the same linear work, 4·D² + 3·M·D (partition.h).
    const double d = static_cast<double>(config.inner_dim()), mlp = static_cast<double>(config.mlp_hidden_dim());
    const double t = static_cast<double>(o.tokens_per_micro_batch);
    const double t_txt = static_cast<double>(std::min(o.text_tokens_per_micro_batch, o.tokens_per_micro_batch));
    const double t_img = t - t_txt;
    m.block_macs = t * (4 * d * d + 3 * mlp * d) + 2 * t * t * d;
    m.embed_macs =
        (t_img * static_cast<double>(config.in_channels) + t_txt * static_cast<double>(config.joint_attention_dim)) * d;
    // The head predicts the target's tokens only (reference images' tokens condition, core/model/flux2_model.h).
    m.head_macs =
        (t_img - static_cast<double>(o.reference_tokens_per_micro_batch)) * d * static_cast<double>(config.out_dim());
    m.describe = [config](int64_t begin, int64_t end) { return DescribeBlocks(config, begin, end); };
    m.largest_quantized_linear = o.quantize == WeightQuant::kNone ? 0 : LargestQuantizedParam(config);
    m.block_lora_input = Flux2BlockLoraInput(config, o);
    std::tie(m.block_adapted_elements, m.largest_adapted) = Flux2AdaptedElements(config, o.all_linear);
    return m;
  };
}

namespace {

// Frozen bytes of a piece: its linear weights in 8 bits under `quantize`, everything else in the compute dtype.
int64_t FrozenBytes(const BlockPlanInfo& info, const PartitionOptions& o) {
  const int64_t linear_bytes = o.quantize == WeightQuant::kNone ? o.bytes_per_param : 1;
  return info.linear_params * linear_bytes + (info.params - info.linear_params) * o.bytes_per_param;
}

double ForwardMacs(const BlockPlanInfo& info, int64_t tokens) {
  return info.macs_per_token * static_cast<double>(tokens) + info.attention_macs + info.extra_macs;
}

}  // namespace

PlanSource FamilyPlanSource(const ModelFamily& model) {
  return [&model](const PartitionOptions& o) -> absl::StatusOr<PlanModel> {
    PlanShape shape;
    shape.tokens = o.tokens_per_micro_batch;
    shape.text_tokens = o.text_tokens_per_micro_batch;
    shape.reference_tokens = o.reference_tokens_per_micro_batch;
    shape.lora_rank = o.lora_rank;
    shape.lora_type = o.lora_type;
    shape.lokr_factor = o.lokr_factor;
    ASSIGN_OR_RETURN(shape.lora_targets, model.LoraTargets(o.all_linear ? "all-linear" : "attention"));
    PlanModel m;
    m.name = model.name() == "wan" ? "Wan" : model.name();
    m.summary = absl::StrCat(model.num_blocks(), " blocks");
    m.hidden_size = model.hidden_size();
    for (int64_t b = 0; b < model.num_blocks(); ++b) {
      const BlockPlanInfo info = model.Block(b, shape);
      m.frozen.block_params.push_back(info.params);
      m.frozen.block_bytes.push_back(FrozenBytes(info, o));
      m.block_lora.push_back(info.lora_params);
      if (b == 0) m.block_macs = ForwardMacs(info, shape.tokens);
      m.block_lora_input = std::max(m.block_lora_input, info.lora_input_elements);
      m.block_adapted_elements = std::max(m.block_adapted_elements, info.adapted_elements);
      m.largest_adapted = std::max(m.largest_adapted, info.largest_adapted);
      if (o.quantize != WeightQuant::kNone) {
        m.largest_quantized_linear = std::max(m.largest_quantized_linear, info.largest_linear_params);
      }
    }
    const BlockPlanInfo embed = model.Embedders(shape), head = model.Head(shape);
    m.frozen.embed_params = embed.params;
    m.frozen.embed_bytes = FrozenBytes(embed, o);
    m.frozen.head_params = head.params;
    m.frozen.head_bytes = FrozenBytes(head, o);
    m.embed_macs = ForwardMacs(embed, shape.tokens);
    m.head_macs = ForwardMacs(head, shape.tokens);
    m.describe = [&model](int64_t begin, int64_t end) { return model.DescribeBlocks(begin, end); };
    return m;
  };
}

absl::StatusOr<PlanSource> PlanSourceFor(const ModelFamily& model) {
  if (model.name() != "flux2") return FamilyPlanSource(model);
  ASSIGN_OR_RETURN(Flux2Config config, ParseFlux2Config(model.config_json()));
  return Flux2PlanSource(config);
}

}  // namespace baton
