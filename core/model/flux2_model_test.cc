#include "core/model/flux2_model.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "core/lora/lora.h"
#include "core/model/flux2_ops.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/common.h"
#include "core/train/optimizer.h"

namespace baton {
namespace {

using test_util::LoadRandomWeights;
using test_util::MakeTinyInputs;
using test_util::TinyFlux2Config;

struct TinyModel {
  Flux2Config config;
  Flux2Shell shell{nullptr};
  Flux2Stage stage{nullptr};
};

TinyModel MakeModel(const Flux2Config& c, at::ScalarType dtype = at::kFloat, uint64_t seed = 7) {
  TinyModel m{c, Flux2Shell(c, at::TensorOptions().dtype(dtype)),
              Flux2Stage(c, Flux2StageRange::Full(c), at::TensorOptions().dtype(dtype))};
  LoadRandomWeights(*m.shell, c, seed);
  LoadRandomWeights(*m.stage, c, seed);
  return m;
}

at::Tensor RunFull(TinyModel& m, const test_util::TinyInputs& in) {
  return Flux2Forward(m.shell, m.stage, in.hidden_states, in.encoder_hidden_states, in.timestep, in.guidance,
                      in.img_ids, in.txt_ids);
}

TEST(Flux2ModelTest, ParameterNamesAreDiffusersNames) {
  Flux2Config c = TinyFlux2Config();
  std::set<std::string> names;
  for (const auto& [name, shape] : Flux2ParameterShapes(c)) names.insert(name);
  for (const char* expected :
       {"x_embedder.weight", "context_embedder.weight", "time_guidance_embed.timestep_embedder.linear_1.weight",
        "time_guidance_embed.guidance_embedder.linear_2.weight", "double_stream_modulation_img.linear.weight",
        "single_stream_modulation.linear.weight", "transformer_blocks.1.attn.to_out.0.weight",
        "transformer_blocks.0.attn.norm_added_k.weight", "transformer_blocks.0.ff_context.linear_in.weight",
        "single_transformer_blocks.2.attn.to_qkv_mlp_proj.weight", "single_transformer_blocks.0.attn.to_out.weight",
        "norm_out.linear.weight", "proj_out.weight"}) {
    EXPECT_TRUE(names.count(expected)) << expected;
  }
  int64_t total = 0;
  for (const auto& [name, shape] : Flux2ParameterShapes(c)) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    total += n;
  }
  EXPECT_EQ(total, c.TotalParams());
}

TEST(Flux2ModelTest, Flux2DevParameterCountIs32B) {
  Flux2Config dev;  // defaults are FLUX.2-dev
  EXPECT_NEAR(static_cast<double>(dev.TotalParams()) / 1e9, 32.22, 0.01);
}

TEST(Flux2ModelTest, BlockRangesComposeExactly) {
  Flux2Config c = TinyFlux2Config();
  TinyModel full = MakeModel(c);
  auto in = MakeTinyInputs(c, 2, 3, 4, 5, 11);
  at::NoGradGuard no_grad;
  at::Tensor reference = RunFull(full, in);
  Flux2Constants k = full.shell(in.timestep, in.guidance, in.img_ids, in.txt_ids, at::kFloat);
  // Every cut point, including inside the double blocks, at the double→single transition and inside singles.
  for (int64_t cut = 0; cut <= c.num_blocks(); ++cut) {
    Flux2Stage first(c, Flux2StageRange{0, cut, true, false}, at::TensorOptions());
    Flux2Stage second(c, Flux2StageRange{cut, c.num_blocks(), false, true}, at::TensorOptions());
    LoadRandomWeights(*first, c, 7);
    LoadRandomWeights(*second, c, 7);
    Flux2Activations a;
    a.img = in.hidden_states;
    a.txt = in.encoder_hidden_states;
    at::Tensor out = second(first(a, k), k).output;
    EXPECT_TRUE(at::equal(out, reference)) << "cut at block " << cut;
  }
}

// Per-block recompute must give exactly what one forward with a graph + backward gives: LoRA gradients
// and input gradients, for stages that hold the embedders, cut inside the double blocks, at the join, inside
// the single blocks, and hold the head; with LoRA dropout on (masks re-drawn from their per-call seed).
TEST(Flux2ModelTest, PerBlockRecomputeBackwardEqualsFullGraphBackward) {
  const Flux2Config c = TinyFlux2Config();
  const int64_t n = c.num_blocks();
  auto in = MakeTinyInputs(c, 2, 3, 4, 5, 11);
  TinyModel full = MakeModel(c);
  Flux2Constants k;
  {
    at::NoGradGuard no_grad;
    k = full.shell(in.timestep, in.guidance, in.img_ids, in.txt_ids, at::kFloat);
  }
  auto make_stage = [&](const Flux2StageRange& r) {
    Flux2Stage stage(c, r, at::TensorOptions());
    LoadRandomWeights(*stage, c, 7);
    EXPECT_TRUE(AttachLora(*stage, {2, 2.0, *ResolveLoraTargets("all-linear"), 0.25, 3}).ok());
    at::NoGradGuard no_grad;
    at::manual_seed(5);  // both copies of a stage get the same B
    for (auto& [name, p] : LoraParameters(*stage)) {
      if (name.find("lora_B") != std::string::npos) p.normal_(0, 0.05);  // LoRA B = 0 would hide bugs
    }
    SetLoraDropoutSeed(*stage, 99);
    return stage;
  };
  for (int64_t cut = 0; cut < n; ++cut) {
    for (bool head : {false, true}) {
      // [0, cut+1) with embedders, or [cut, n) with the head: every boundary on both sides.
      const Flux2StageRange range =
          head ? Flux2StageRange{cut, n, false, true} : Flux2StageRange{0, cut + 1, true, false};
      Flux2Activations x;
      {
        at::NoGradGuard no_grad;
        Flux2Activations raw;
        raw.img = in.hidden_states;
        raw.txt = in.encoder_hidden_states;
        x = head ? make_stage({0, cut, true, false})->forward(raw, k) : raw;
      }
      auto leaves = [&] {
        Flux2Activations a = x;
        for (at::Tensor* t : {&a.img, &a.txt, &a.joint}) {
          if (t->defined()) *t = t->detach().clone().requires_grad_(head);
        }
        return a;
      };
      // The seed: a loss on the head's output, or fixed output gradients for every live output.
      auto seed = [&](const Flux2Activations& out) -> std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> {
        if (head) return {{out.output.pow(2).mean()}, {}};
        std::vector<at::Tensor> outs = out.Live(), grads;
        for (size_t i = 0; i < outs.size(); ++i) {
          grads.push_back(at::ones_like(outs[i]).mul_(0.1 * static_cast<double>(i + 1)));
        }
        return {outs, grads};
      };
      Flux2Stage a = make_stage(range), b = make_stage(range);
      Flux2Activations in_a = leaves(), in_b = leaves();
      auto [roots, grads] = seed(a->forward(in_a, k));
      torch::autograd::backward(roots, grads);
      std::vector<Flux2Activations> checkpoints;
      const Flux2Activations out_b = b->ForwardCheckpointed(in_b, k, &checkpoints);
      EXPECT_TRUE(at::equal(out_b.Live().front(), a->forward(in_a, k).Live().front())) << cut;
      b->BackwardFromCheckpoints(std::move(checkpoints), k, seed);

      const std::string where = absl::StrCat(head ? "head stage from block " : "embedder stage to block ", cut);
      auto ga = LoraGradients(*a), gb = LoraGradients(*b);
      ASSERT_EQ(ga.size(), gb.size()) << where;
      for (const auto& [name, g] : ga) {
        ASSERT_TRUE(g.defined() && gb.at(name).defined()) << where << " " << name;
        EXPECT_TRUE(at::equal(g, gb.at(name))) << where << " " << name;
        EXPECT_GT(g.abs().sum().item<double>(), 0) << where << " " << name;
      }
      const auto live_a = in_a.Live(), live_b = in_b.Live();
      for (size_t i = 0; i < live_a.size(); ++i) {
        EXPECT_EQ(live_a[i].grad().defined(), head) << where;
        if (head) {
          EXPECT_TRUE(at::equal(live_a[i].grad(), live_b[i].grad())) << where << " input " << i;
        }
      }
    }
  }
}

// Recompute only where memory requires it: the first k blocks of a stage checkpointed, the rest with their
// graph. For every k (0 = no recompute, all blocks = full recompute) and stages that hold the embedders, the
// head, the join or none of them, LoRA and input gradients must equal forward() + backward bitwise.
TEST(Flux2ModelTest, HybridRecomputeBackwardEqualsFullGraphBackward) {
  const Flux2Config c = TinyFlux2Config();
  const int64_t n = c.num_blocks();
  auto in = MakeTinyInputs(c, 2, 3, 4, 5, 11);
  TinyModel full = MakeModel(c);
  Flux2Constants k;
  {
    at::NoGradGuard no_grad;
    k = full.shell(in.timestep, in.guidance, in.img_ids, in.txt_ids, at::kFloat);
  }
  auto make_stage = [&](const Flux2StageRange& r) {
    Flux2Stage stage(c, r, at::TensorOptions());
    LoadRandomWeights(*stage, c, 7);
    EXPECT_TRUE(AttachLora(*stage, {2, 2.0, *ResolveLoraTargets("all-linear"), 0.25, 3}).ok());
    at::NoGradGuard no_grad;
    at::manual_seed(5);
    for (auto& [name, p] : LoraParameters(*stage)) {
      if (name.find("lora_B") != std::string::npos) p.normal_(0, 0.05);
    }
    SetLoraDropoutSeed(*stage, 99);
    return stage;
  };
  const Flux2StageRange ranges[] = {Flux2StageRange::Full(c), {1, n - 1, false, false}, {0, 2, true, false}};
  for (const Flux2StageRange& range : ranges) {
    Flux2Activations x;
    {
      at::NoGradGuard no_grad;
      Flux2Activations raw;
      raw.img = in.hidden_states;
      raw.txt = in.encoder_hidden_states;
      x = range.block_begin > 0 ? make_stage({0, range.block_begin, true, false})->forward(raw, k) : raw;
    }
    const bool grads_in = !range.has_embedders;  // a later stage sends input gradients back
    auto leaves = [&] {
      Flux2Activations a = x;
      for (at::Tensor* t : {&a.img, &a.txt, &a.joint}) {
        if (t->defined()) *t = t->detach().clone().requires_grad_(grads_in);
      }
      return a;
    };
    auto seed = [&](const Flux2Activations& out) -> std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> {
      if (range.has_head) return {{out.output.pow(2).mean()}, {}};
      std::vector<at::Tensor> outs = out.Live(), grads;
      for (size_t i = 0; i < outs.size(); ++i) grads.push_back(at::ones_like(outs[i]).mul_(0.1 * (i + 1.0)));
      return {outs, grads};
    };
    Flux2Stage a = make_stage(range);
    Flux2Activations in_a = leaves();
    Flux2Activations out_a = a->forward(in_a, k);
    auto [roots, grads] = seed(out_a);
    torch::autograd::backward(roots, grads);
    const auto ga = LoraGradients(*a);
    const int64_t blocks = range.block_end - range.block_begin;
    for (int64_t rc = 0; rc <= blocks; ++rc) {
      const std::string where =
          absl::StrCat("blocks [", range.block_begin, ", ", range.block_end, "), ", rc, " recomputed");
      Flux2Stage b = make_stage(range);
      Flux2Activations in_b = leaves();
      std::vector<Flux2Activations> checkpoints;
      const Flux2Activations out_b = b->ForwardCheckpointed(in_b, k, &checkpoints, rc);
      EXPECT_TRUE(at::equal(out_b.Live().front(), out_a.Live().front())) << where;
      b->BackwardFromCheckpoints(std::move(checkpoints), k, seed, rc);
      const auto gb = LoraGradients(*b);
      ASSERT_EQ(ga.size(), gb.size()) << where;
      for (const auto& [name, g] : ga) {
        ASSERT_TRUE(g.defined() && gb.at(name).defined()) << where << " " << name;
        EXPECT_TRUE(at::equal(g, gb.at(name))) << where << " " << name;
      }
      const auto live_a = in_a.Live(), live_b = in_b.Live();
      for (size_t i = 0; i < live_a.size() && grads_in; ++i) {
        ASSERT_TRUE(live_b[i].grad().defined()) << where << " input " << i;
        EXPECT_TRUE(at::equal(live_a[i].grad(), live_b[i].grad())) << where << " input " << i;
      }
    }
  }
}

TEST(Flux2ModelTest, LoraWithZeroBReproducesBaseOutputExactly) {
  Flux2Config c = TinyFlux2Config();
  TinyModel m = MakeModel(c);
  auto in = MakeTinyInputs(c, 1, 2, 2, 3, 5);
  at::NoGradGuard no_grad;
  at::Tensor base = RunFull(m, in);
  LoraSpec spec{4, 8.0, *ResolveLoraTargets("all-linear"), 0.0, 1};
  ASSERT_TRUE(AttachLora(*m.stage, spec).ok());
  EXPECT_TRUE(at::equal(RunFull(m, in), base));
  // And a non-zero B changes it (the adapters are really in the path).
  for (auto& [name, p] : LoraParameters(*m.stage)) {
    if (name.find("lora_B") != std::string::npos) p.fill_(0.01);
  }
  EXPECT_FALSE(at::allclose(RunFull(m, in), base));
}

TEST(Flux2ModelTest, GradientsReachOnlyLoraParameters) {
  Flux2Config c = TinyFlux2Config();
  TinyModel m = MakeModel(c);
  ASSERT_TRUE(AttachLora(*m.stage, {2, 2.0, *ResolveLoraTargets("attention"), 0.0, 1}).ok());
  auto in = MakeTinyInputs(c, 1, 2, 2, 3, 5);
  RunFull(m, in).pow(2).mean().backward();
  int lora = 0;
  for (const auto& p : m.stage->named_parameters()) {
    bool is_lora = p.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(p.value().requires_grad(), is_lora) << p.key();
    if (is_lora) {
      ++lora;
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
    } else {
      EXPECT_FALSE(p.value().grad().defined()) << p.key();
    }
  }
  for (const auto& p : m.shell->named_parameters()) EXPECT_FALSE(p.value().grad().defined()) << p.key();
  // attention preset: 8 linears per double block, 2 per single block.
  EXPECT_EQ(lora, 2 * (8 * c.num_layers + 2 * c.num_single_layers));
  // lora_A gets a gradient only through B ≠ 0, so B (zero at init) must have a non-zero one.
  double b_grad = 0;
  for (auto& [name, g] : LoraGradients(*m.stage)) {
    if (name.find("lora_B") != std::string::npos) b_grad += g.abs().sum().item<double>();
  }
  EXPECT_GT(b_grad, 0);
}

TEST(Flux2ModelTest, LoraGradientsMatchFiniteDifferences) {
  Flux2Config c = TinyFlux2Config();
  TinyModel m = MakeModel(c, at::kDouble);
  ASSERT_TRUE(AttachLora(*m.stage, {2, 4.0, *ResolveLoraTargets("attention"), 0.0, 3}).ok());
  m.stage->to(at::kDouble);
  {
    at::NoGradGuard no_grad;
    at::manual_seed(0);
    for (auto& [name, p] : LoraParameters(*m.stage)) p.copy_(at::randn_like(p) * 0.1);
  }
  auto in = MakeTinyInputs(c, 1, 2, 3, 2, 9, at::kDouble);
  at::Tensor target = at::randn({1, 6, c.in_channels}, at::kDouble);
  auto loss_fn = [&] { return (RunFull(m, in) - target).pow(2).mean(); };
  loss_fn().backward();
  auto params = LoraParameters(*m.stage);
  int checked = 0;
  for (const char* name :
       {"transformer_blocks.0.attn.to_q.lora_A.weight", "transformer_blocks.1.attn.to_add_out.lora_B.weight",
        "single_transformer_blocks.2.attn.to_qkv_mlp_proj.lora_A.weight",
        "single_transformer_blocks.0.attn.to_out.lora_B.weight"}) {
    at::Tensor p = params.at(name);
    at::Tensor grad = p.grad().clone();
    for (int64_t idx : {int64_t{0}, p.numel() / 2, p.numel() - 1}) {
      const double eps = 1e-5;
      double orig;
      double plus, minus;
      {
        at::NoGradGuard no_grad;
        auto flat = p.view({-1});
        orig = flat[idx].item<double>();
        flat[idx] = orig + eps;
        plus = loss_fn().item<double>();
        flat[idx] = orig - eps;
        minus = loss_fn().item<double>();
        flat[idx] = orig;
      }
      double numeric = (plus - minus) / (2 * eps);
      double analytic = grad.view({-1})[idx].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-7 + 1e-5 * std::abs(numeric)) << name << "[" << idx << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12);
}

TEST(Flux2ModelTest, FewStepsOnAFixedBatchReduceTheLoss) {
  Flux2Config c = TinyFlux2Config();
  TinyModel m = MakeModel(c);
  ASSERT_TRUE(AttachLora(*m.stage, {4, 4.0, *ResolveLoraTargets("all-linear"), 0.0, 1}).ok());
  auto in = MakeTinyInputs(c, 2, 2, 2, 3, 5);
  at::Tensor target = at::randn({2, 4, c.in_channels});
  OptimizerConfig opt;
  opt.lr = 1e-2;
  Optimizer adamw(opt);
  auto master = CloneToCpuFloat(LoraParameters(*m.stage));
  std::vector<double> losses;
  for (int step = 0; step < 15; ++step) {
    at::Tensor loss = FlowMatchingLoss(RunFull(m, in), target);
    loss.backward();
    losses.push_back(loss.item<double>());
    auto grads = CloneToCpuFloat(LoraGradients(*m.stage));
    ZeroLoraGradients(*m.stage);
    ASSERT_TRUE(adamw.Step(master, grads, opt.lr).ok());
    ASSERT_TRUE(AssignLoraParameters(*m.stage, master).ok());
  }
  EXPECT_LT(losses.back(), 0.7 * losses.front());
}

TEST(Flux2ModelTest, DropoutMasksFollowTheSeed) {
  Flux2Config c = TinyFlux2Config();
  TinyModel m = MakeModel(c);
  ASSERT_TRUE(AttachLora(*m.stage, {2, 2.0, *ResolveLoraTargets("attention"), 0.5, 1}).ok());
  {
    at::NoGradGuard no_grad;
    for (auto& [name, p] : LoraParameters(*m.stage)) p.fill_(0.05);
  }
  m.stage->train(true);
  auto in = MakeTinyInputs(c, 1, 2, 2, 3, 5);
  at::NoGradGuard no_grad;
  SetLoraDropoutSeed(*m.stage, 1);
  at::Tensor a = RunFull(m, in);
  SetLoraDropoutSeed(*m.stage, 1);
  at::Tensor b = RunFull(m, in);
  SetLoraDropoutSeed(*m.stage, 2);
  at::Tensor d = RunFull(m, in);
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(at::equal(a, d));
}

TEST(Flux2ModelTest, SingleBlockMatchesIndependentReference) {
  // Recomputes one single-stream block from its weight matrices with plain per-head loops.
  Flux2Config c = TinyFlux2Config();
  const int64_t D = c.inner_dim(), M = c.mlp_hidden_dim(), H = c.num_attention_heads, Dh = c.attention_head_dim;
  Flux2SingleTransformerBlock block(c, at::TensorOptions().dtype(at::kDouble));
  at::manual_seed(4);
  {
    at::NoGradGuard no_grad;
    for (auto& p : block->parameters()) p.copy_(at::randn_like(p) * 0.3);
  }
  const int64_t S = 5;
  at::Tensor x = at::randn({1, S, D}, at::kDouble);
  at::Tensor mod = at::randn({1, 3 * D}, at::kDouble) * 0.5;
  // Named tensors, not a structured binding: clang 14 cannot capture bindings in the lambda below.
  const auto tables = RopeTables(at::cat({TextPositionIds(2), ImagePositionIds(1, 3)}), c.axes_dims_rope, c.rope_theta);
  const at::Tensor cos = std::get<0>(tables), sin = std::get<1>(tables);
  at::Tensor got = block(x, mod, cos.to(at::kDouble), sin.to(at::kDouble));

  at::Tensor shift = mod.narrow(1, 0, D), scale = mod.narrow(1, D, D), gate = mod.narrow(1, 2 * D, D);
  at::Tensor mean = x.mean(-1, true), var = (x - mean).pow(2).mean(-1, true);
  at::Tensor h = ((x - mean) / at::sqrt(var + c.eps)) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
  at::Tensor w1 = block->attn->to_qkv_mlp_proj->weight, w2 = block->attn->to_out->weight;
  at::Tensor proj = at::matmul(h, w1.t());
  at::Tensor attn_out = at::zeros({1, S, D}, at::kDouble);
  for (int64_t head = 0; head < H; ++head) {
    auto qh = proj.narrow(2, head * Dh, Dh), kh = proj.narrow(2, D + head * Dh, Dh),
         vh = proj.narrow(2, 2 * D + head * Dh, Dh);
    auto rms = [&](at::Tensor t, at::Tensor w) { return t / at::sqrt(t.pow(2).mean(-1, true) + c.eps) * w; };
    qh = rms(qh, block->attn->norm_q->weight);
    kh = rms(kh, block->attn->norm_k->weight);
    auto rope = [&](at::Tensor t) {
      at::Tensor out = t.clone();
      for (int64_t i = 0; i < Dh; i += 2) {
        at::Tensor cs = cos.narrow(1, i, 1).to(at::kDouble).t(), sn = sin.narrow(1, i, 1).to(at::kDouble).t();
        at::Tensor a = t.narrow(2, i, 1).squeeze(2), b = t.narrow(2, i + 1, 1).squeeze(2);
        out.narrow(2, i, 1).copy_((a * cs - b * sn).unsqueeze(2));
        out.narrow(2, i + 1, 1).copy_((b * cs + a * sn).unsqueeze(2));
      }
      return out;
    };
    qh = rope(qh);
    kh = rope(kh);
    at::Tensor probs = at::softmax(at::matmul(qh, kh.transpose(1, 2)) / std::sqrt(static_cast<double>(Dh)), -1);
    attn_out.narrow(2, head * Dh, Dh).copy_(at::matmul(probs, vh));
  }
  at::Tensor gate_up = proj.narrow(2, 3 * D, 2 * M);
  at::Tensor mlp = at::silu(gate_up.narrow(2, 0, M)) * gate_up.narrow(2, M, M);
  at::Tensor expect = x + gate.unsqueeze(1) * at::matmul(at::cat({attn_out, mlp}, -1), w2.t());
  EXPECT_TRUE(at::allclose(got, expect, 1e-10, 1e-10)) << (got - expect).abs().max().item<double>();
}

TEST(Flux2ModelTest, KleinConfigWithoutGuidanceRuns) {
  Flux2Config c = TinyFlux2Config(/*guidance=*/false);
  TinyModel m = MakeModel(c);
  auto in = MakeTinyInputs(c, 1, 2, 2, 3, 5);
  at::NoGradGuard no_grad;
  at::Tensor out = Flux2Forward(m.shell, m.stage, in.hidden_states, in.encoder_hidden_states, in.timestep, at::Tensor(),
                                in.img_ids, in.txt_ids);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 4, c.in_channels}));
  EXPECT_TRUE(at::isfinite(out).all().item<bool>());
}

}  // namespace
}  // namespace baton
