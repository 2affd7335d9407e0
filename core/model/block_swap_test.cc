// Block swap (offload: blocks) on the CPU, through the family interface as a stage worker builds stages: the LoRA
// gradients and the stage's output are bitwise those of the stage without it over several micro-batches of forward
// and recompute (the weights really are copied in for each use), at most two swapped blocks are resident at once, a
// swapped block's device tensors are empty between uses, and training without recomputing them is refused.
#include "core/model/block_swap.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/lora/lora.h"
#include "core/lora/lora_linear.h"
#include "core/model/flux2_weights.h"
#include "core/model/model_family.h"
#include "core/model/wan_weights.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/testing/tiny_wan.h"

namespace baton {
namespace {

struct SwapModel {
  std::unique_ptr<ModelFamily> family;
  TensorMap stage_inputs, constants;  // the shell's, for the full range
};

TensorMap MergedConstants(const ShellOutputs& s) {
  TensorMap k = s.constants;
  for (const auto& [name, t] : s.tables) k[name] = t;
  return k;
}

SwapModel Open(const std::string& dir, const TensorMap& model_inputs) {
  SwapModel m;
  auto family = OpenModel(dir);
  EXPECT_TRUE(family.ok()) << family.status();
  m.family = std::move(*family);
  auto shell = m.family->BuildShell(at::kFloat, at::kCPU);
  EXPECT_TRUE(shell.ok()) << shell.status();
  auto out = (*shell)->Run(model_inputs, at::kFloat);
  EXPECT_TRUE(out.ok()) << out.status();
  m.stage_inputs = out->inputs;
  m.constants = MergedConstants(*out);
  return m;
}

std::unique_ptr<StageModel> Stage(const SwapModel& m) {
  LoraSpec spec;
  spec.rank = 2;
  spec.targets = *m.family->LoraTargets("all-linear");
  spec.dropout = 0.25;  // masks are re-drawn in the recompute: swapped or not, the same
  auto stage = m.family->BuildStage(m.family->FullRange(), at::kFloat, at::kCPU, &spec, true, WeightQuant::kNone);
  EXPECT_TRUE(stage.ok()) << stage.status();
  at::manual_seed(5);
  at::NoGradGuard no_grad;
  for (auto& [name, p] : LoraParameters((*stage)->module())) {
    if (name.find("lora_B") != std::string::npos) p.normal_(0, 0.05);  // B = 0 would hide a wrong weight
  }
  return std::move(*stage);
}

// Three micro-batches of checkpointed forward and recompute-backward with every block recomputed (the pipeline's
// default); the outputs and the accumulated LoRA gradients.
std::map<std::string, at::Tensor> Train(StageModel& stage, const SwapModel& m) {
  std::map<std::string, at::Tensor> out;
  for (int mb = 0; mb < 3; ++mb) {
    TensorMap in;
    for (const auto& [name, t] : m.stage_inputs) in[name] = t.is_floating_point() ? t * (1.0 + 0.1 * mb) : t;
    std::vector<TensorMap> checkpoints;
    const TensorMap y = stage.ForwardCheckpointed(in, m.constants, &checkpoints, StageModel::kAllBlocks);
    out["output " + std::to_string(mb)] = y.at("output").clone();
    stage.BackwardFromCheckpoints(
        std::move(checkpoints), m.constants,
        [](const TensorMap& o) -> std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> {
          return {{o.at("output").pow(2).mean()}, {}};
        },
        StageModel::kAllBlocks);
  }
  for (auto& [name, g] : LoraGradients(stage.module())) out[name] = g.clone();
  return out;
}

void ExpectSwapIsExact(const SwapModel& m, int64_t swapped) {
  auto plain = Stage(m), swapping = Stage(m);
  const int64_t blocks = static_cast<int64_t>(swapping->BlockModules().size());
  ASSERT_GT(blocks, swapped);
  auto swap = SwapFirstBlocks(*swapping, swapped, nullptr);
  ASSERT_TRUE(swap.ok()) << swap.status();
  EXPECT_EQ((*swap)->resident(), 0);
  EXPECT_GT((*swap)->host_bytes(), 0);
  const auto want = Train(*plain, m), got = Train(*swapping, m);
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, t] : want) EXPECT_TRUE(at::equal(t, got.at(name))) << name;
  EXPECT_GE((*swap)->peak_resident(), 1);
  EXPECT_LE((*swap)->peak_resident(), 2);
  // Between uses, a swapped block holds no frozen weight on its device; the resident ones hold all of theirs.
  std::vector<torch::nn::Module*> modules = swapping->BlockModules();
  int empty = 0;
  for (int64_t b = 0; b < swapped; ++b) {
    for (const auto& p : modules[static_cast<size_t>(b)]->named_parameters()) {
      if (!IsLoraParameterName(p.key()) && p.value().numel() == 0) ++empty;
    }
  }
  EXPECT_GT(empty, 0);
  EXPECT_LE((*swap)->resident(), 2);
  // A swapped block must be recomputed: a graph through it, or a hybrid that keeps its graph, is refused.
  std::vector<TensorMap> checkpoints;
  EXPECT_THROW(swapping->ForwardCheckpointed(m.stage_inputs, m.constants, &checkpoints, swapped - 1), c10::Error);
  EXPECT_THROW(swapping->Forward(m.stage_inputs, m.constants), c10::Error);
  at::NoGradGuard no_grad;  // a forward without a graph (validation, samples) runs swapped blocks in turn
  EXPECT_TRUE(at::equal(swapping->Forward(m.stage_inputs, m.constants).at("output"),
                        plain->Forward(m.stage_inputs, m.constants).at("output")));
  EXPECT_FALSE(SwapFirstBlocks(*plain, blocks + 1, nullptr).ok());
}

TEST(BlockSwapTest, Flux2StageIsBitwiseTheStageWithoutIt) {
  const Flux2Config config = test_util::TinyFlux2Config();
  const std::string dir = test_util::MakeTempDir("block_swap_flux2");
  ASSERT_TRUE(WriteRandomFlux2Weights(config, dir, 7).ok());
  test_util::TinyInputs in = test_util::MakeTinyInputs(config, 2, 2, 3, 5, 11);
  const SwapModel m = Open(dir, {{"hidden_states", in.hidden_states},
                                 {"encoder_hidden_states", in.encoder_hidden_states},
                                 {"timestep", in.timestep},
                                 {"guidance", in.guidance},
                                 {"img_ids", in.img_ids},
                                 {"txt_ids", in.txt_ids}});
  ExpectSwapIsExact(m, 3);  // the double blocks and the first single block: across the join
}

TEST(BlockSwapTest, WanStageIsBitwiseTheStageWithoutIt) {
  const WanConfig c = test_util::TinyWanConfig(3);
  const std::string dir = test_util::MakeTempDir("block_swap_wan");
  ASSERT_TRUE(WriteRandomWanWeights(c, dir, 3).ok());
  auto family = OpenModel(dir);
  ASSERT_TRUE(family.ok()) << family.status();
  at::manual_seed(5);
  NoisyBatch batch;
  batch.noisy = at::randn({1, 4, 2, 4, 4});
  batch.prompt_embeds = at::randn({1, 5, 16});
  batch.timestep = at::full({1}, 0.4);
  auto inputs = (*family)->MicroBatchInputs(batch);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ExpectSwapIsExact(Open(dir, *inputs), 2);
}

}  // namespace
}  // namespace baton
