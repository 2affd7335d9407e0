// A model family: everything the pipeline needs to know about one transformer architecture (FLUX.2, Wan 2.x),
// behind one interface, so the coordinator, the stage worker, the planner and the trainers never name a family.
// Shell + one stage holding every block, embedders and head is exactly the upstream model's forward.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/statusor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/lora/adapter_type.h"
#include "core/model/stage_build.h"
#include "core/quant/weight_quant.h"

namespace baton {

using TensorMap = std::map<std::string, at::Tensor>;
struct LoraSpec;
class BlockSwap;

// The split every family follows (DESIGN.md "How a model is cut"):
//   shell  -- the small frozen part every block depends on, run by the coordinator once per micro-batch: it turns
//             the model's inputs (diffusers argument names) into the first stage's INPUTS, the CONSTANTS every
//             stage receives (modulation vectors, text context, ...) and cacheable TABLES (RoPE) with their key;
//   stage  -- a contiguous range of blocks [begin, end) over the family's global block list, plus the input
//             embedders on the first stage and the output head on the last. Activations, constants and tables
//             cross stage boundaries as named tensors (TensorMap) whose names the family chooses; the last stage's
//             output is always named "output" and has the target's shape (the flow-matching loss compares them).

// Which part of the model a stage (or one model chunk of an interleaved stage) holds.
struct StageRange {
  int64_t block_begin = 0;  // global block index [begin, end) over ModelFamily::num_blocks()
  int64_t block_end = 0;
  bool has_embedders = false;  // the input embedders (the first stage)
  bool has_head = false;       // the output head (the last stage)
};

// What the shell computes for one micro-batch.
struct ShellOutputs {
  TensorMap inputs;        // INPUTS: to the first stage only
  TensorMap constants;     // CONSTANTS: to every stage, once per micro-batch
  std::string tables_key;  // names `tables`; a stage caches tables by key, so they travel once per stage and key
  TensorMap tables;        // e.g. RoPE cos/sin (fp32)
};

// One stage's (or chunk's) block range with its frozen weights and LoRA adapters.
class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual torch::nn::Module& module() = 0;  // parameters by diffusers name; LoRA adapters live under it
  virtual const StageRange& range() const = 0;

  // `constants` holds the micro-batch's CONSTANTS and the TABLES named by their key, merged.
  virtual TensorMap Forward(const TensorMap& in, const TensorMap& constants) = 0;

  // Activation checkpointing, as Flux2StageImpl documents it: ForwardCheckpointed runs without a graph and keeps
  // each piece's input in `checkpoints`; BackwardFromCheckpoints recomputes piece by piece from the last and
  // back-propagates through it. Gradients are bitwise those of Forward() + backward for every recompute_blocks
  // (kAllBlocks: every block; 0: none; r: the first r blocks of the range).
  static constexpr int64_t kAllBlocks = -1;
  using BackwardSeed =
      std::function<std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>(const TensorMap& output)>;
  virtual TensorMap ForwardCheckpointed(const TensorMap& in, const TensorMap& constants,
                                        std::vector<TensorMap>* checkpoints, int64_t recompute_blocks) = 0;
  virtual void BackwardFromCheckpoints(std::vector<TensorMap> checkpoints, const TensorMap& constants,
                                       const BackwardSeed& seed, int64_t recompute_blocks) = 0;

  // Block swap (core/model/block_swap.h, SwapFirstBlocks): the range's blocks in order, and the swap of the first
  // swap->blocks() of them, which the stage then runs each block under (once; the stage keeps it).
  virtual std::vector<torch::nn::Module*> BlockModules() = 0;
  virtual void UseBlockSwap(std::shared_ptr<BlockSwap> swap) = 0;
};

// The coordinator's frozen shell.
class ShellModel {
 public:
  virtual ~ShellModel() = default;
  // `model_inputs` by the upstream forward's argument names (a micro-batch's, see ModelFamily::MicroBatchInputs);
  // modulations come out in `dtype`, tables in fp32.
  virtual absl::StatusOr<ShellOutputs> Run(const TensorMap& model_inputs, at::ScalarType dtype) = 0;
};

// The planner's view of one block (global index), from the config alone.
struct BlockPlanInfo {
  int64_t params = 0;                 // frozen parameters
  int64_t linear_params = 0;          // of which block-linear weights (8-bit under `quantize`)
  int64_t lora_params = 0;            // at the options' rank and targets
  double macs_per_token = 0;          // forward linear MACs per token
  double attention_macs = 0;          // forward attention MACs for the options' token counts
  double extra_macs = 0;              // forward MACs scaling with neither (embedders, head: their own token counts)
  int64_t largest_linear_params = 0;  // the largest of its block-linear weights (dequantized one at a time)
  int64_t lora_input_elements = 0;    // per micro-batch: tokens x in_features summed over the adapted linears
  int64_t adapted_elements = 0;       // out x in summed over the adapted linears (LoHa's and DoRA's matrices)
  int64_t largest_adapted = 0;        // out x in of the largest adapted linear
  std::string kind;                   // "double", "single", "block": RenderPlan groups consecutive kinds
  int64_t kind_index = 0;             // index within its kind (diffusers numbering)
};

// Sizes the planner assumes for one micro-batch (tokens after patchify).
struct PlanShape {
  int64_t tokens = 4608;         // image/video tokens + text tokens, times samples
  int64_t text_tokens = 512;     // the text part
  int64_t reference_tokens = 0;  // FLUX.2 reference images' part (through every block; the head skips them)
  int64_t lora_rank = 16;
  AdapterType lora_type = AdapterType::kLora;  // each type's parameter count (adapter_type.h)
  int64_t lokr_factor = -1;
  std::vector<std::string> lora_targets;  // resolved targets (ModelFamily::LoraTargets)
};

// What a stage receives, by envelope kind. kInputs: INPUTS (any floating dtype; converted on use). kConstants: the
// shell's constants (without the "rope_key/<key>" entry the wire adds). kTables: one key's tables with the "/<key>"
// suffix of their wire names stripped. kActivation: a stage boundary's activation (the names the family's stages
// output). kTarget: {"target"}. kGradient: the gradient of an activation (its floating tensors, same names).
enum class WireKind { kInputs, kConstants, kTables, kActivation, kTarget, kGradient };

// A TARGET may add the samples' loss weights (the job's loss.weighting, core/train/common.h LossWeighting) under this
// name, for every family: [b] floating, finite and ≥ 0. WithoutLossWeighting checks them against the target's batch
// and returns the rest, for the family's own checks; InvalidArgument saying what was wrong.
inline constexpr char kLossWeightingName[] = "loss_weighting";
absl::StatusOr<TensorMap> WithoutLossWeighting(const TensorMap& target);

// One training micro-batch as the sampler draws it, before the family shapes it into its model inputs. Shapes are
// the cache's: `noisy` and `target` are the stacked cached latents (FLUX.2: [b, Si, C] packed tokens; Wan: [b, C, F,
// H, W]), so nothing generic assumes "tokens x channels".
struct NoisyBatch {
  at::Tensor noisy;                // x_t = (1-t)·x0 + t·ε, fp32, the stacked cached latents' shape
  at::Tensor prompt_embeds;        // [b, L, text_dim] fp32
  std::string conditioning;        // the cache's image-to-video kind ("" = none; core/model/wan_i2v.h)
  at::Tensor condition;            // [b, cc, F or 1, H, W] fp32 with a conditioning; else undefined
  at::Tensor image_embeds;         // [b, tokens, image_dim] fp32 (CLIP image embeddings); or undefined
  at::Tensor timestep;             // [b] in (0, 1]
  int64_t grid_h = 0, grid_w = 0;  // the samples' latent grid (cache record)
  double guidance = 0;             // the job's guidance (families without a guidance embedder ignore it)
  // Masked loss: [b, grid_h, grid_w] weights in [0, 1] per latent cell (ones for a record without a mask); undefined
  // when no record of the batch has one.
  at::Tensor loss_weights;
  // FLUX.2 reference images (editing): every reference's packed latent tokens, one reference after the other,
  // [b, Σ h·w, C] fp32, and each reference's latent grid (h, w), the same for every sample of the batch. The model
  // sees them after the noisy target's tokens, with Flux2Pipeline's position ids; the loss covers the target only.
  // Undefined / empty: none.
  at::Tensor references;
  std::vector<std::pair<int64_t, int64_t>> reference_grids;
};

// What a training cache holds, as far as a model cares (core/data/cache.h's CacheLayout, which this floor cannot see).
struct CacheContents {
  int64_t latent_channels = 0;
  int64_t text_dim = 0;
  std::string conditioning;  // image-to-video kind, "" = none
  int64_t condition_channels = 0;
  int64_t image_dim = 0;  // image embeddings' width, 0 = none
};

// An opened model of one family: its config and memory-mapped weights. OpenModel picks the family from the folder's
// config.json `_class_name` (Flux2Transformer2DModel, WanTransformer3DModel); an original single file needs its
// config.json. The refactor of issue 11 may extend this interface; every consumer goes through it.
class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual std::string name() const = 0;         // "flux2", "wan"
  virtual std::string config_json() const = 0;  // the parsed config, canonical (fingerprints, logs)
  virtual int64_t num_blocks() const = 0;
  virtual int64_t hidden_size() const = 0;
  virtual std::vector<std::string> WeightFiles() const = 0;  // the safetensors files behind the weights

  // Planner.
  virtual BlockPlanInfo Block(int64_t global_index, const PlanShape& shape) const = 0;
  virtual BlockPlanInfo Embedders(const PlanShape& shape) const = 0;         // first stage only
  virtual BlockPlanInfo Head(const PlanShape& shape) const = 0;              // last stage only
  virtual std::string DescribeBlocks(int64_t begin, int64_t end) const = 0;  // "double 0-7, single 0-11"

  // Models.
  // `shared`: the frozen tensors of a stage built with the same arguments (stage_build.h), used instead of a load.
  virtual absl::StatusOr<std::unique_ptr<StageModel>> BuildStage(const StageRange& range, at::ScalarType dtype,
                                                                 at::Device device, const LoraSpec* lora, bool train,
                                                                 WeightQuant quant,
                                                                 const FrozenTensors* shared = nullptr) const = 0;
  virtual absl::StatusOr<std::unique_ptr<ShellModel>> BuildShell(at::ScalarType dtype, at::Device device) const = 0;

  // Wire: names, ranks, hidden sizes, dtype and batch agreement of what a stage receives; errors say what was wrong.
  virtual absl::Status CheckWire(WireKind kind, const TensorMap& tensors, at::ScalarType dtype) const = 0;

  // `baton forward`: OK when `model_inputs` (the upstream forward's argument names) can run through the shell and a
  // full stage; else InvalidArgument naming `source`, the tensor and what it must be.
  virtual absl::Status CheckModelInputs(const TensorMap& model_inputs, const std::string& source) const = 0;

  // Training. The image/video tokens of one cached sample (its latents' shape without the batch dimension), which
  // the timestep shift depends on; and a micro-batch's model inputs by the upstream forward's argument names (what
  // ShellModel::Run takes), on the CPU. The flow-matching target is the batch's ε − x0 in the cache's shape, which
  // must be the shape of the last stage's "output".
  virtual int64_t LatentTokens(at::IntArrayRef sample_latents) const = 0;
  // OK when a cache of these latents, prompt embeddings and conditioning fits this model, else InvalidArgument saying
  // what differs (the caller names the cache).
  virtual absl::Status CheckCacheFits(const CacheContents& cache) const = 0;
  virtual absl::StatusOr<TensorMap> MicroBatchInputs(const NoisyBatch& batch) const = 0;
  // How much each element of the target counts in the loss (weights in [0, 1], broadcastable to it; FlowMatchingLoss);
  // undefined: all fully. The records' masks (batch.loss_weights), and Wan's clean first frame (TI2V), which leaves
  // latent frame 0 out.
  virtual at::Tensor LossMask(const NoisyBatch& batch) const = 0;

  // The whole model as one stage.
  StageRange FullRange() const { return {0, num_blocks(), true, true}; }

  // LoRA: the targets of a preset ("attention", "all-linear") or a comma list; the other naming users load
  // (FLUX.2: BFL/ComfyUI "diffusion_model."; Wan: original/ComfyUI "diffusion_model.blocks.N.self_attn.q").
  virtual absl::StatusOr<std::vector<std::string>> LoraTargets(const std::string& preset_or_list) const = 0;
  virtual absl::StatusOr<TensorMap> LoraToOriginalNames(const TensorMap& peft) const = 0;
  virtual absl::StatusOr<TensorMap> LoraFromOriginalNames(const TensorMap& original) const = 0;
  // Whether adapters of `spec` (its type over its targets) have an original naming (save_bfl), checked before a run.
  virtual absl::Status CheckOriginalNaming(const LoraSpec& spec) const = 0;
};

absl::StatusOr<std::unique_ptr<ModelFamily>> OpenModel(const std::string& path, const std::string& config_path = "");
// A config-only model from a transformer config.json (no weights): it plans, names and checks, and builds nothing
// (`baton plan --model-config`).
absl::StatusOr<std::unique_ptr<ModelFamily>> OpenModelConfig(const std::string& config_path);

}  // namespace baton
