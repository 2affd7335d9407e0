#include "core/pipeline/partition.h"

#include <absl/strings/str_split.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/quant/weight_quant.h"
#include "core/testing/paths.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::SourceDir;

Flux2Config LoadPartitionModel(const std::string& name) {
  auto config = LoadFlux2Config(JoinPath(SourceDir(), "configs/models/" + name + ".json"));
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Flux2Config{};
}

constexpr int64_t kGB = 1000'000'000;

PartitionOptions Stages(int p, std::vector<int64_t> budgets = {}) {
  PartitionOptions o;
  o.stages = p;
  o.memory_budget_bytes = std::move(budgets);
  return o;
}

// Training MACs of one micro-batch on a stage, from the layer shapes (independently of the partitioner):
// every linear is in x out MACs per token that passes through it; attention is 2·T²·D; blocks run forward,
// input-gradient backward and the recomputed forward (x3), embedders forward and recompute (x2), the head x3.
double SplitCost(const Flux2Config& c, int k, int p, int64_t i, int64_t j) {
  const PartitionOptions o;
  const double d = c.inner_dim(), m = c.mlp_hidden_dim();
  const double t_txt = o.text_tokens_per_micro_batch, t_img = o.tokens_per_micro_batch - t_txt, t = t_img + t_txt;
  const double attention = 2 * t * t * d;
  // Double: each stream's tokens through q, k, v, out (D x D) and SwiGLU in (D x 2M) and out (M x D).
  const double dbl = t_img * (4 * d * d + d * 2 * m + m * d) + t_txt * (4 * d * d + d * 2 * m + m * d) + attention;
  // Single: to_qkv_mlp_proj (D x (3D + 2M)) and to_out ((D + M) x D) for every token.
  const double sgl = t * (d * (3 * d + 2 * m) + (d + m) * d) + attention;
  double cost = 0;
  for (int64_t b = i; b < j; ++b) cost += 3 * (c.IsDoubleBlock(b) ? dbl : sgl);
  if (k == 0) cost += 2 * (t_img * c.in_channels * d + t_txt * c.joint_attention_dim * d);
  if (k == p - 1) cost += 3 * t_img * d * c.out_dim();
  return cost;
}

int64_t SplitParams(const Flux2Config& c, int k, int p, int64_t i, int64_t j) {
  int64_t params = 0;
  for (int64_t b = i; b < j; ++b) params += c.IsDoubleBlock(b) ? c.DoubleBlockParams() : c.SingleBlockParams();
  if (k == 0) params += c.EmbedderParams();
  if (k == p - 1) params += c.inner_dim() * c.out_dim();  // proj_out; norm_out.linear is the shell's
  return params;
}

// The fp32 input copies the adapter path makes under bf16 (partition.h), counted from the layer shapes: the
// single block's to_qkv_mlp_proj (D in) and to_out (D + M in) over every token are the most (dev and klein).
int64_t DevLoraInputCopyBytes(const Flux2Config& c, const PartitionOptions& o) {
  if (o.activation_bytes == 4) return 0;
  return o.tokens_per_micro_batch * (c.inner_dim() + c.inner_dim() + c.mlp_hidden_dim()) * 4;
}

void ExpectContiguousCover(const Flux2Config& c, const Plan& plan, int p) {
  ASSERT_EQ(plan.stages.size(), static_cast<size_t>(p));
  EXPECT_EQ(plan.stages.front().block_begin, 0);
  EXPECT_EQ(plan.stages.back().block_end, c.num_blocks());
  for (int k = 0; k < p; ++k) {
    const StageSpec& s = plan.stages[k];
    EXPECT_EQ(s.index, k);
    EXPECT_LT(s.block_begin, s.block_end) << "stage " << k << " is empty";
    if (k > 0) {
      EXPECT_EQ(s.block_begin, plan.stages[k - 1].block_end);
    }
    EXPECT_EQ(s.has_embedders, k == 0);
    EXPECT_EQ(s.has_head, k == p - 1);
    EXPECT_NEAR(s.cost, SplitCost(c, k, p, s.block_begin, s.block_end), 1e-9 * s.cost);
    EXPECT_EQ(s.params, SplitParams(c, k, p, s.block_begin, s.block_end));
  }
}

TEST(PartitionTest, TwoStagesOfDevBalanceWithinOneBlock) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  auto plan = PartitionFlux2(dev, Stages(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectContiguousCover(dev, *plan, 2);
  EXPECT_TRUE(plan->fits);
  const double diff = std::abs(plan->stages[0].cost - plan->stages[1].cost);
  EXPECT_LE(diff, SplitCost(dev, 1, 3, 20, 21));  // one (middle) block
  // 28 blocks each: all 8 double blocks and 20 single blocks on stage 0.
  EXPECT_EQ(plan->stages[0].block_end, 28);
  // Every frozen parameter except the coordinator's shell (norm_out.linear included) is on exactly one stage.
  EXPECT_EQ(plan->stages[0].params + plan->stages[1].params, dev.TotalParams() - dev.ShellParams());
  // ...so memory, which follows parameters, is not balanced: stage 0 holds the double blocks' second stream.
  EXPECT_GT(plan->stages[0].param_bytes, plan->stages[1].param_bytes * 5 / 4);
}

// A stage-local optimizer (replica_exchange: allreduce) keeps AdamW's moments and the step's gradient sums on the
// stage: 6 fp32 copies of its adapters instead of 2, in the LoRA term and the estimate.
TEST(PartitionTest, AStageLocalOptimizerCountsItsStateOnTheStage) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  PartitionOptions o = Stages(2);
  auto coordinator = PartitionFlux2(dev, o);
  o.local_optimizer = true;
  auto local = PartitionFlux2(dev, o);
  ASSERT_TRUE(coordinator.ok() && local.ok());
  for (int k = 0; k < 2; ++k) {
    const StageSpec& a = coordinator->stages[k];
    const StageSpec& b = local->stages[k];
    ASSERT_EQ(a.block_end, b.block_end);  // no budget: the same cut
    EXPECT_EQ(b.lora_bytes, a.lora_bytes * 3);
    EXPECT_EQ(b.est_memory_bytes - a.est_memory_bytes, b.lora_bytes - a.lora_bytes);
  }
}

TEST(PartitionTest, DoubleAndSingleBlocksCostTheSameComputeButNotTheSameMemory) {
  // A double block holds twice a single block's parameters, yet every token passes through one stream's
  // weights only, so both do 4·D² + 3·M·D MACs per token (plus the same attention).
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  const PartitionOptions o;
  const double dbl = StageComputeCost(dev, o, 0, 1, false, false);
  const double sgl = StageComputeCost(dev, o, dev.num_layers, dev.num_layers + 1, false, false);
  EXPECT_DOUBLE_EQ(dbl, sgl);
  EXPECT_NEAR(dbl, SplitCost(dev, 1, 3, 0, 1), 1e-9 * dbl);
  EXPECT_GT(dev.DoubleBlockParams(), 2 * dev.SingleBlockParams() * 99 / 100);
  // Recompute adds one forward to the two passes of a block.
  PartitionOptions no_rc;
  no_rc.recompute = RecomputePolicy::kNone;
  EXPECT_NEAR(StageComputeCost(dev, no_rc, 0, 1, false, false) * 3, 2 * dbl, 1e-9 * dbl);
}

// On a CPU a small model's blocks cost what their operations cost to dispatch, per token stream: the demo's tiny
// FLUX.2 (D = 64, 2 double + 4 single, 128 px + 128 text tokens), cut by multiply-adds alone after the first
// single block, left stage 0 with ~64 % of the measured compute (bench_sweep); counting a double block's two streams
// cuts it after the double blocks. On CUDA (asynchronous launches) and at FLUX.2-dev's size nothing changes.
TEST(PartitionTest, OnACpuEachTokenStreamCostsItsDispatchToo) {
  const Flux2Config tiny = LoadPartitionModel("flux2-small");
  PartitionOptions o = Stages(2);
  o.tokens_per_micro_batch = 192;
  o.text_tokens_per_micro_batch = 128;
  o.device = PlanDevice::kCpu;
  auto cpu = PartitionFlux2(tiny, o);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->stages[0].block_end, 2) << RenderPlan(*cpu);
  const double dbl = StageComputeCost(tiny, o, 0, 1, false, false);
  const double sgl = StageComputeCost(tiny, o, 2, 3, false, false);
  EXPECT_GT(dbl, 1.5 * sgl);
  o.device = PlanDevice::kCuda;
  auto cuda = PartitionFlux2(tiny, o);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->stages[0].block_end, 3) << RenderPlan(*cuda);
  EXPECT_DOUBLE_EQ(StageComputeCost(tiny, o, 0, 1, false, false), StageComputeCost(tiny, o, 2, 3, false, false));
  // FLUX.2-dev on CPUs: the dispatch term is noise beside a block's multiply-adds (same cut as on CUDA).
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  PartitionOptions dev_cpu = Stages(2), dev_cuda = Stages(2);
  dev_cpu.device = PlanDevice::kCpu;
  auto a = PartitionFlux2(dev, dev_cpu), b = PartitionFlux2(dev, dev_cuda);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->stages[0].block_end, b->stages[0].block_end);
  EXPECT_LT(StageComputeCost(dev, dev_cpu, 0, 1, false, false),
            1.001 * StageComputeCost(dev, dev_cuda, 0, 1, false, false));
}

TEST(PartitionTest, ComputeSplitDiffersFromParameterSplitWhereItMatters) {
  // bench_pipeline's model: 2 double + 4 single blocks. Balancing parameters put the two double blocks
  // alone on stage 0 (stage 1 then did 62% of the work, measured); balancing compute splits 3 | 3.
  Flux2Config c;
  c.in_channels = 128;
  c.num_layers = 2;
  c.num_single_layers = 4;
  c.attention_head_dim = 64;
  c.num_attention_heads = 6;
  c.joint_attention_dim = 256;
  c.axes_dims_rope = {16, 16, 16, 16};
  PartitionOptions o = Stages(2);
  o.tokens_per_micro_batch = 320;
  o.text_tokens_per_micro_batch = 64;
  auto plan = PartitionFlux2(c, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stages[0].block_end, 3);
  EXPECT_EQ(DescribeBlocks(c, 0, 3), "double 0-1, single 0");
  // Parameter balance would have cut after the double blocks.
  auto worst_params = [&](int64_t b) { return std::max(SplitParams(c, 0, 2, 0, b), SplitParams(c, 1, 2, b, 6)); };
  EXPECT_LT(worst_params(2), worst_params(3));
  EXPECT_LT(worst_params(2), worst_params(1));
}

TEST(PartitionTest, MatchesBruteForceOnAllThreeStageSplits) {
  for (const char* name : {"flux2-small", "flux2-klein-4b", "flux2-klein-9b"}) {
    const Flux2Config c = LoadPartitionModel(name);
    const int64_t n = c.num_blocks();
    const int p = 3;
    double best = INFINITY;
    for (int64_t a = 1; a < n; ++a) {
      for (int64_t b = a + 1; b < n; ++b) {
        best = std::min(best, std::max({SplitCost(c, 0, p, 0, a), SplitCost(c, 1, p, a, b), SplitCost(c, 2, p, b, n)}));
      }
    }
    auto plan = PartitionFlux2(c, Stages(p));
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectContiguousCover(c, *plan, p);
    EXPECT_NEAR(plan->max_cost, best, 1e-9 * best) << name;
  }
}

TEST(PartitionTest, MemoryBudgetsMoveTheBoundary) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  auto free = PartitionFlux2(dev, Stages(2));
  auto tight0 = PartitionFlux2(dev, Stages(2, {28 * kGB, 60 * kGB}));
  auto tight1 = PartitionFlux2(dev, Stages(2, {60 * kGB, 28 * kGB}));
  ASSERT_TRUE(free.ok() && tight0.ok() && tight1.ok());
  ASSERT_TRUE(tight0->fits) << tight0->message;
  ASSERT_TRUE(tight1->fits) << tight1->message;
  EXPECT_LE(tight0->stages[0].est_memory_bytes, 28 * kGB);
  EXPECT_LE(tight1->stages[1].est_memory_bytes, 28 * kGB);
  EXPECT_LT(tight0->stages[0].block_end, free->stages[0].block_end);
  EXPECT_GT(tight1->stages[0].block_end, free->stages[0].block_end);
  // The budgeted split is the best the budget allows: one more (single) block on stage 0 would not fit.
  const StageSpec& s0 = tight0->stages[0];
  ASSERT_GE(s0.block_end, dev.num_layers);
  const int64_t unit = PartitionOptions().tokens_per_micro_batch * dev.inner_dim() * 2;
  // (1F1B at 2 stages: stage 0 has 2 micro-batches in flight, each keeping one checkpoint per block.)
  EXPECT_GT(s0.est_memory_bytes + dev.SingleBlockParams() * 2 + SingleBlockLoraParams(dev, 16, false) * 8 + 2 * unit,
            28 * kGB);
}

TEST(PartitionTest, DevInBf16DoesNotFitTwo24GBCardsButFitsFour) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  auto two = PartitionFlux2(dev, Stages(2, {24 * kGB}));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_FALSE(two->fits);
  ExpectContiguousCover(dev, *two, 2);
  EXPECT_NE(two->message.find("over by"), std::string::npos) << two->message;
  EXPECT_NE(two->message.find("budget is 24.0 GB"), std::string::npos) << two->message;
  for (const StageSpec& s : two->stages) EXPECT_GT(s.est_memory_bytes, 24 * kGB);
  // The message names a stage count of 24 GB cards that works; check it against the planner itself.
  const std::string marker = "needs >= ";
  const size_t at = two->message.find(" stages of 24.0 GB");
  ASSERT_NE(at, std::string::npos) << two->message;
  const size_t num = two->message.rfind(marker, at) + marker.size();
  const int q = std::stoi(two->message.substr(num, at - num));
  auto at_q = PartitionFlux2(dev, Stages(q, {24 * kGB}));
  auto below_q = PartitionFlux2(dev, Stages(q - 1, {24 * kGB}));
  ASSERT_TRUE(at_q.ok() && below_q.ok());
  EXPECT_TRUE(at_q->fits);
  EXPECT_FALSE(below_q->fits);
  // 8-bit frozen weights halve the 64 GB, which the message points out.
  EXPECT_NE(two->message.find("8-bit"), std::string::npos) << two->message;

  auto four = PartitionFlux2(dev, Stages(4, {24 * kGB}));
  ASSERT_TRUE(four.ok());
  EXPECT_TRUE(four->fits) << four->message;
  for (const StageSpec& s : four->stages) EXPECT_LE(s.est_memory_bytes, 24 * kGB) << "stage " << s.index;
}

TEST(PartitionTest, Klein4BFitsOne24GBCard) {
  const Flux2Config klein = LoadPartitionModel("flux2-klein-4b");
  auto plan = PartitionFlux2(klein, Stages(1, {24 * kGB}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->fits) << plan->message;
  ExpectContiguousCover(klein, *plan, 1);
  EXPECT_LE(plan->stages[0].est_memory_bytes, 24 * kGB);
}

TEST(PartitionTest, MemoryEstimateFollowsTheDocumentedFormula) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  PartitionOptions o = Stages(4);
  auto one_f = PartitionFlux2(dev, o);
  o.schedule = ScheduleKind::kGPipe;
  o.micro_batches = 16;
  auto gpipe = PartitionFlux2(dev, o);
  o.bytes_per_param = 1;
  auto int8 = PartitionFlux2(dev, o);
  ASSERT_TRUE(one_f.ok() && gpipe.ok() && int8.ok());
  const int64_t unit = o.tokens_per_micro_batch * dev.inner_dim() * o.activation_bytes;
  const int64_t graph = kBlockWorkingFactor * unit + DevLoraInputCopyBytes(dev, o);
  for (int k = 0; k < 4; ++k) {
    const StageSpec& s = one_f->stages[k];
    const int64_t blocks = s.block_end - s.block_begin;
    EXPECT_EQ(s.activation_bytes, (4 - k) * blocks * unit + graph);
    EXPECT_EQ(s.overhead_bytes, kCudaProcessBytes);  // the default device: cuda, an estimate
    EXPECT_EQ(s.transient_bytes, 0);                 // nothing is dequantized
    EXPECT_EQ(s.est_memory_bytes, s.param_bytes + s.lora_params * 8 + s.activation_bytes + s.overhead_bytes);
    EXPECT_EQ(s.param_bytes, s.params * 2);
    // Same split (costs decide it), but GPipe keeps all 16 micro-batches' inputs alive.
    EXPECT_EQ(gpipe->stages[k].block_end, s.block_end);
    EXPECT_EQ(gpipe->stages[k].activation_bytes - s.activation_bytes, (16 - (4 - k)) * blocks * unit);
    EXPECT_EQ(int8->stages[k].param_bytes * 2, s.param_bytes);
  }
  // Without recompute every in-flight micro-batch keeps every block's graph.
  o = Stages(4);
  o.recompute = RecomputePolicy::kNone;
  auto no_rc = PartitionFlux2(dev, o);
  ASSERT_TRUE(no_rc.ok());
  for (int k = 0; k < 4; ++k) {
    const StageSpec& s = no_rc->stages[k];
    EXPECT_EQ(s.activation_bytes, (4 - k) * (s.block_end - s.block_begin) * graph);
  }
}

TEST(PartitionTest, AdapterInputCopiesWeighOnlyUnderANarrowerComputeDtype) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  PartitionOptions o = Stages(2);
  o.recompute = RecomputePolicy::kNone;
  auto bf16 = PartitionFlux2(dev, o);
  o.activation_bytes = 4;
  auto fp32 = PartitionFlux2(dev, o);
  ASSERT_TRUE(bf16.ok() && fp32.ok());
  const int64_t unit = o.tokens_per_micro_batch * dev.inner_dim() * 2;
  for (int k = 0; k < 2; ++k) {
    const StageSpec& s = bf16->stages[k];
    const int64_t kept = s.in_flight * (s.block_end - s.block_begin);
    EXPECT_EQ(s.activation_bytes, kept * (kBlockWorkingFactor * unit + DevLoraInputCopyBytes(dev, Stages(2))));
    EXPECT_EQ(fp32->stages[k].activation_bytes, kept * kBlockWorkingFactor * unit * 2);
  }
}

// The adapters in the compute dtype (lora_dtype: bf16) read each input itself: no fp32 copy in a block's graph, so a
// stage keeps kBlockWorkingFactor units per block; LoRA dropout keeps the dropped input, in the compute dtype.
TEST(PartitionTest, AdaptersInTheComputeDtypeKeepNoFp32CopyOfTheirInputs) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  PartitionOptions o = Stages(2);
  o.recompute = RecomputePolicy::kNone;
  o.lora_fp32 = false;
  auto bf16_math = PartitionFlux2(dev, o);
  o.lora_dropout = true;
  auto dropout = PartitionFlux2(dev, o);
  ASSERT_TRUE(bf16_math.ok() && dropout.ok());
  const int64_t unit = o.tokens_per_micro_batch * dev.inner_dim() * 2;
  const int64_t copy_fp32 = DevLoraInputCopyBytes(dev, Stages(2));
  for (int k = 0; k < 2; ++k) {
    const StageSpec& s = bf16_math->stages[k];
    const int64_t kept = s.in_flight * (s.block_end - s.block_begin);
    EXPECT_EQ(s.activation_bytes, kept * kBlockWorkingFactor * unit);
    const StageSpec& d = dropout->stages[k];
    EXPECT_EQ(d.activation_bytes,
              d.in_flight * (d.block_end - d.block_begin) * (kBlockWorkingFactor * unit + copy_fp32 / 2));
  }
  // FLUX.2-dev's single block keeps ~566 MB less per micro-batch at 1024 px (the figure).
  EXPECT_NEAR(static_cast<double>(copy_fp32) / 1e6, 566, 1);
  // The plan's footnote says the copies are counted only when they are.
  const std::string copies = "fp32 copies of the adapters' inputs";
  auto fp32_math = PartitionFlux2(dev, Stages(2));
  ASSERT_TRUE(fp32_math.ok());
  EXPECT_EQ(RenderPlan(*bf16_math).find(copies), std::string::npos) << RenderPlan(*bf16_math);
  EXPECT_NE(RenderPlan(*fp32_math).find(copies), std::string::npos) << RenderPlan(*fp32_math);
}

// With 8-bit weights one weight at a time is dequantized for its matmul: the largest, FLUX.2-dev's
// to_qkv_mlp_proj [3D + 2M, D], in the compute dtype, plus one fp32 tile of the dequantization.
TEST(PartitionTest, TransientCountsTheLargestDequantizedWeight) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  const int64_t d = dev.inner_dim(), m = dev.mlp_hidden_dim();
  PartitionOptions o = Stages(2);
  o.quantize = WeightQuant::kInt8;
  auto plan = PartitionFlux2(dev, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const StageSpec& s : plan->stages) {
    EXPECT_EQ(s.transient_bytes, (3 * d + 2 * m) * d * 2 + kDequantTileBytes);
    EXPECT_EQ(s.est_memory_bytes,
              s.param_bytes + s.lora_params * 8 + s.activation_bytes + s.transient_bytes + s.overhead_bytes);
  }
  o.bytes_per_param = 4;  // fp32 compute: the dequantized weight is the only copy
  auto fp32 = PartitionFlux2(dev, o);
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(fp32->stages[0].transient_bytes, (3 * d + 2 * m) * d * 4);
  EXPECT_NE(RenderPlan(*plan).find("transient"), std::string::npos);
}

// A stage's fixed cost is its own device's: a CPU stage beside a CUDA one gets the CPU figure, and the other way.
TEST(PartitionTest, EachStageGetsItsOwnDevicesOverhead) {
  const Flux2Config klein = LoadPartitionModel("flux2-klein-4b");
  PartitionOptions o = Stages(2);
  o.device = PlanDevice::kCpu;
  o.devices = {PlanDevice::kCuda, PlanDevice::kCpu};
  auto plan = PartitionFlux2(klein, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stages[0].overhead_bytes, kCudaProcessBytes);
  EXPECT_EQ(plan->stages[1].overhead_bytes, kCpuProcessBytes);
  EXPECT_EQ(plan->stages[0].device, PlanDevice::kCuda);
  EXPECT_NE(RenderPlan(*plan).find("devices cuda,cpu"), std::string::npos) << RenderPlan(*plan);
  o.devices = {PlanDevice::kCuda};
  EXPECT_FALSE(PartitionFlux2(klein, o).ok()) << "one device for two stages";
}

TEST(PartitionTest, LoraParamsMatchDiffusersDefaultsAndGrowWithAllLinear) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  auto plan = PartitionFlux2(dev, Stages(3));
  ASSERT_TRUE(plan.ok());
  int64_t total = 0;
  for (const StageSpec& s : plan->stages) total += s.lora_params;
  // diffusers' FLUX.2 default targets give 784·D·r parameters (~77 M for dev at rank 16).
  EXPECT_EQ(total, 784 * dev.inner_dim() * 16);
  EXPECT_GT(DoubleBlockLoraParams(dev, 16, true), 2 * DoubleBlockLoraParams(dev, 16, false));
  EXPECT_EQ(SingleBlockLoraParams(dev, 16, true), SingleBlockLoraParams(dev, 16, false));
  EXPECT_EQ(DoubleBlockLoraParams(dev, 0, true), 0);
}

// Each LoRA type's parameters and matrices: DoRA adds a magnitude per output and builds two [out, in] matrices at a
// time; LoHa has twice LoRA's parameters and keeps three [out, in] matrices per adapted linear in a block's graph; LoKr
// has a fraction of LoRA's parameters and no matrices. The plan's stages grow (or shrink) accordingly.
TEST(PartitionTest, EachLoraTypeCountsItsParametersAndMatrices) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  const int64_t d = dev.inner_dim();
  EXPECT_EQ(DoubleBlockLoraParams(dev, 16, false, AdapterType::kDora), DoubleBlockLoraParams(dev, 16, false) + 4 * d);
  EXPECT_EQ(DoubleBlockLoraParams(dev, 16, false, AdapterType::kLoha), 2 * DoubleBlockLoraParams(dev, 16, false));
  EXPECT_LT(DoubleBlockLoraParams(dev, 16, false, AdapterType::kLokr), DoubleBlockLoraParams(dev, 16, false) / 10);
  auto memory = [&](AdapterType type) {
    PartitionOptions o = Stages(3);
    o.lora_type = type;
    auto plan = PartitionFlux2(dev, o);
    EXPECT_TRUE(plan.ok()) << plan.status();
    int64_t total = 0;
    for (const StageSpec& s : plan->stages) total += s.est_memory_bytes;
    return total;
  };
  const int64_t lora = memory(AdapterType::kLora);
  // DoRA: per stage two of the largest adapted linear's [out, in] (fp32 math), single blocks' to_qkv_mlp_proj.
  EXPECT_GE(memory(AdapterType::kDora) - lora, 3 * 2 * int64_t{4} * d * (3 * d + 2 * dev.mlp_hidden_dim()));
  EXPECT_GT(memory(AdapterType::kLoha), memory(AdapterType::kDora));
  EXPECT_LT(memory(AdapterType::kLokr), lora);
}

TEST(PartitionTest, RejectsBadOptions) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  EXPECT_FALSE(PartitionFlux2(dev, Stages(0)).ok());
  auto too_many = PartitionFlux2(dev, Stages(57));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("56 blocks into 57 stages"), absl::string_view::npos);
  EXPECT_TRUE(PartitionFlux2(dev, Stages(56)).ok());
  EXPECT_FALSE(PartitionFlux2(dev, Stages(2, {kGB, kGB, kGB})).ok());
  EXPECT_FALSE(PartitionFlux2(dev, Stages(2, {-kGB})).ok());
  PartitionOptions o = Stages(2);
  o.bytes_per_param = 0;
  EXPECT_FALSE(PartitionFlux2(dev, o).ok());
  o = Stages(2);
  o.lora_rank = -1;
  EXPECT_FALSE(PartitionFlux2(dev, o).ok());
  o = Stages(2);
  o.text_tokens_per_micro_batch = o.tokens_per_micro_batch + 1;
  EXPECT_FALSE(PartitionFlux2(dev, o).ok());
}

TEST(PartitionTest, DescribesBlockRanges) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  EXPECT_EQ(DescribeBlocks(dev, 0, 8), "double 0-7");
  EXPECT_EQ(DescribeBlocks(dev, 8, 20), "single 0-11");
  EXPECT_EQ(DescribeBlocks(dev, 5, 10), "double 5-7, single 0-1");
  EXPECT_EQ(DescribeBlocks(dev, 8, 9), "single 0");
}

TEST(PartitionTest, RenderPlanShowsOneRowPerStageAndFlagsOverBudget) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  auto plan = PartitionFlux2(dev, Stages(2, {24 * kGB}));
  ASSERT_TRUE(plan.ok());
  const std::string text = RenderPlan(dev, *plan);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  ASSERT_GE(lines.size(), 4u) << text;
  EXPECT_NE(lines[2].find("embedders, double 0-7, single 0-"), std::string::npos) << text;
  EXPECT_NE(lines[3].find(", head"), std::string::npos) << text;
  EXPECT_NE(lines[2].find("OVER"), std::string::npos) << text;
  EXPECT_NE(text.find(plan->message), std::string::npos);

  auto fits = PartitionFlux2(dev, Stages(4, {24 * kGB}));
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(RenderPlan(dev, *fits).find("OVER"), std::string::npos);
}

// Under quantize: int8 the block linears take 1 byte per weight plus an fp32 scale per output row; norms,
// embedders and the head stay in the compute dtype. Checked against the layer shapes of one single block
// (to_qkv_mlp_proj D -> 3D+2M and to_out D+M -> D, no bias; q/k RMSNorm scales of head_dim each).
TEST(PartitionTest, QuantizedWeightsAreSizedPerParameter) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  const int64_t d = dev.inner_dim(), m = dev.mlp_hidden_dim(), dh = dev.attention_head_dim;
  const FrozenSizes bf16 = ComputeFrozenSizes(dev, WeightQuant::kNone, 2);
  const FrozenSizes int8 = ComputeFrozenSizes(dev, WeightQuant::kInt8, 2);
  const int64_t last = dev.num_blocks() - 1;
  EXPECT_EQ(int8.block_params[last], dev.SingleBlockParams());
  EXPECT_EQ(int8.block_bytes[last], d * (3 * d + 2 * m) + (3 * d + 2 * m) * 4 + (d + m) * d + d * 4 + 2 * dh * 2);
  EXPECT_EQ(bf16.block_bytes[last], dev.SingleBlockParams() * 2);
  EXPECT_EQ(int8.embed_bytes, bf16.embed_bytes);  // embedders and head are never quantized
  EXPECT_EQ(int8.head_bytes, d * dev.out_dim() * 2);
}

// The headline: FLUX.2-dev on two 24 GB cards with int8 block weights. bf16 does not fit.
TEST(PartitionTest, DevWithInt8WeightsFitsTwo24GBCards) {
  const Flux2Config dev = LoadPartitionModel("flux2-dev");
  PartitionOptions o = Stages(2, {24 * kGB});
  o.quantize = WeightQuant::kInt8;
  o.recompute = RecomputePolicy::kAuto;
  auto plan = PartitionFlux2(dev, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->fits) << plan->message;
  for (const StageSpec& s : plan->stages) {
    EXPECT_LE(s.est_memory_bytes, 24 * kGB) << "stage " << s.index;
    EXPECT_LT(s.param_bytes, 18 * kGB) << "stage " << s.index;  // ~32 B params / 2, at ~1 byte each
    EXPECT_GT(s.recompute_blocks, 0) << "stage " << s.index << ": without recompute the graphs need ~100 GB";
  }
  o.quantize = WeightQuant::kNone;
  auto bf16 = PartitionFlux2(dev, o);
  ASSERT_TRUE(bf16.ok());
  EXPECT_FALSE(bf16->fits);
}

// recompute: auto recomputes the fewest leading blocks with which each stage fits: none without a budget,
// and with one, r such that r fits and r - 1 would not (the act formula of partition.h, computed here).
TEST(PartitionTest, AutoRecomputeTakesTheFewestBlocksThatFit) {
  const Flux2Config klein = LoadPartitionModel("flux2-klein-4b");
  PartitionOptions o = Stages(2);
  o.recompute = RecomputePolicy::kAuto;
  auto free = PartitionFlux2(klein, o);
  ASSERT_TRUE(free.ok());
  for (const StageSpec& s : free->stages) EXPECT_EQ(s.recompute_blocks, 0);
  o.recompute = RecomputePolicy::kNone;
  auto none = PartitionFlux2(klein, o);
  ASSERT_TRUE(none.ok());
  EXPECT_DOUBLE_EQ(none->max_cost, free->max_cost);  // same work as no recompute

  const int64_t unit = o.tokens_per_micro_batch * klein.inner_dim() * o.activation_bytes;
  const int64_t graph = kBlockWorkingFactor * unit + DevLoraInputCopyBytes(klein, o);  // one block's graph
  for (int64_t budget : {8 * kGB, 12 * kGB, 60 * kGB}) {
    o = Stages(2, {budget});
    o.recompute = RecomputePolicy::kAuto;
    auto plan = PartitionFlux2(klein, o);
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(plan->fits) << budget << ": " << plan->message;
    for (const StageSpec& s : plan->stages) {
      const int64_t n = s.block_end - s.block_begin, r = s.recompute_blocks;
      auto act = [&](int64_t rr) { return s.in_flight * (rr * unit + (n - rr) * graph) + (rr > 0 ? graph : 0); };
      EXPECT_EQ(s.activation_bytes, act(r)) << budget;
      const int64_t fixed = s.est_memory_bytes - s.activation_bytes;
      EXPECT_LE(fixed + act(r), budget);
      if (r > 0) {
        EXPECT_GT(fixed + act(r - 1), budget) << "stage " << s.index << " recomputes more than it must";
      }
      // The cost counts the recomputed forwards: between no recompute and full recompute of the stage.
      EXPECT_GE(s.cost, StageComputeCost(klein, o, s.block_begin, s.block_end, s.has_embedders, s.has_head, 0));
      EXPECT_EQ(s.cost, StageComputeCost(klein, o, s.block_begin, s.block_end, s.has_embedders, s.has_head, r));
    }
  }
  // 12 GB forces recompute somewhere (no recompute needs ~27 GB on stage 0), 60 GB fits without.
  auto at = [&](int64_t budget) {
    PartitionOptions q = Stages(2, {budget});
    q.recompute = RecomputePolicy::kAuto;
    return PartitionFlux2(klein, q)->stages;
  };
  EXPECT_GT(at(12 * kGB)[0].recompute_blocks + at(12 * kGB)[1].recompute_blocks, 0);
  EXPECT_EQ(at(60 * kGB)[0].recompute_blocks + at(60 * kGB)[1].recompute_blocks, 0);
}

TEST(PartitionTest, OverheadIsTheDevicesFixedCost) {
  const Flux2Config klein = LoadPartitionModel("flux2-klein-4b");
  PartitionOptions o = Stages(1);
  o.device = PlanDevice::kCpu;
  auto cpu = PartitionFlux2(klein, o);
  o.device = PlanDevice::kCuda;
  auto cuda = PartitionFlux2(klein, o);
  o.overhead_bytes = 7;
  auto fixed = PartitionFlux2(klein, o);
  ASSERT_TRUE(cpu.ok() && cuda.ok() && fixed.ok());
  EXPECT_EQ(cpu->stages[0].overhead_bytes, kCpuProcessBytes);
  EXPECT_EQ(cuda->stages[0].overhead_bytes, kCudaProcessBytes);
  EXPECT_EQ(fixed->stages[0].overhead_bytes, 7);
  EXPECT_EQ(cuda->stages[0].est_memory_bytes - cpu->stages[0].est_memory_bytes, kCudaProcessBytes - kCpuProcessBytes);
  EXPECT_FALSE(ParsePlanDevice("tpu").ok());
  EXPECT_TRUE(ParsePlanDevice("cuda:1").ok());
  EXPECT_FALSE(ParseRecomputePolicy("yes").ok());
  EXPECT_EQ(*ParseRecomputePolicy("true"), RecomputePolicy::kAll);
}

TEST(PartitionTest, ParsesByteSizes) {
  EXPECT_EQ(*ParseByteSize("24GB"), 24 * kGB);
  EXPECT_EQ(*ParseByteSize("24GiB"), int64_t{24} << 30);
  EXPECT_EQ(*ParseByteSize("512MB"), 512'000'000);
  EXPECT_EQ(*ParseByteSize("1.5TB"), 1'500'000'000'000);
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("4096B"), 4096);
  EXPECT_EQ(*ParseByteSize(" 24 gb "), 24 * kGB);
  EXPECT_EQ(*ParseByteSize("2Gi"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("0.5GiB"), int64_t{1} << 29);
  EXPECT_EQ(*ParseByteSize("16G"), 16 * kGB);
  EXPECT_EQ(*ParseByteSize("8KiB"), 8192);
  for (const char* bad : {"", "GB", "-1GB", "24XB", "1.5", "1.5B", "99999999999TB", "1..5GB", "1e9", "24 G B", "1.GB",
                          "9223372036854775808"}) {
    auto r = ParseByteSize(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' parsed as " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), absl::string_view::npos);
    }
  }
  EXPECT_EQ(FormatByteSize(*ParseByteSize("64.4GB")), "64.4 GB");
}

}  // namespace
}  // namespace baton
