#include "core/model/flux2_weights.h"

#include <gtest/gtest.h>

#include "core/keys/flux2_keys.h"
#include "core/model/flux2_model.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/common.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::MakeTempDir;
using test_util::MakeTinyInputs;
using test_util::TinyFlux2Config;

at::Tensor ForwardFrom(const Flux2Checkpoint& ckpt, const test_util::TinyInputs& in,
                       at::ScalarType dtype = at::kFloat) {
  auto shell = BuildFlux2Shell(ckpt, dtype, at::kCPU);
  auto stage = BuildFlux2Stage(ckpt, Flux2StageRange::Full(ckpt.config()), dtype, at::kCPU, nullptr, false);
  EXPECT_TRUE(shell.ok()) << shell.status();
  EXPECT_TRUE(stage.ok()) << stage.status();
  at::NoGradGuard no_grad;
  return Flux2Forward(*shell, *stage, in.hidden_states.to(dtype), in.encoder_hidden_states.to(dtype), in.timestep,
                      in.guidance, in.img_ids, in.txt_ids);
}

TEST(Flux2KeysTest, KnownMappings) {
  auto q = DiffusersToBfl("transformer_blocks.3.attn.to_k.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->key, "double_blocks.3.img_attn.qkv.weight");
  EXPECT_EQ(q->chunk, 1);
  EXPECT_EQ(q->num_chunks, 3);
  auto n = DiffusersToBfl("transformer_blocks.0.attn.norm_added_q.weight");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->key, "double_blocks.0.txt_attn.norm.query_norm.scale");
  auto out = DiffusersToBfl("norm_out.linear.weight");
  ASSERT_TRUE(out);
  EXPECT_EQ(out->key, "final_layer.adaLN_modulation.1.weight");
  EXPECT_TRUE(out->swap_halves);
  EXPECT_EQ(DiffusersToBfl("single_transformer_blocks.7.attn.to_out.weight")->key, "single_blocks.7.linear2.weight");
  EXPECT_EQ(DiffusersToBfl("transformer_blocks.1.attn.to_out.0.weight")->key, "double_blocks.1.img_attn.proj.weight");
  EXPECT_FALSE(DiffusersToBfl("transformer_blocks.1.attn.to_out.1.weight"));
  EXPECT_EQ(BflToDiffusers("double_blocks.2.txt_attn.qkv.weight"),
            (std::vector<std::string>{"transformer_blocks.2.attn.add_q_proj.weight",
                                      "transformer_blocks.2.attn.add_k_proj.weight",
                                      "transformer_blocks.2.attn.add_v_proj.weight"}));
}

TEST(Flux2KeysTest, StateDictRoundTripIsExact) {
  Flux2Config c = TinyFlux2Config();
  auto diffusers = RandomFlux2StateDict(c, 3);
  auto bfl = DiffusersToBflStateDict(diffusers);
  ASSERT_TRUE(bfl.ok()) << bfl.status();
  EXPECT_TRUE(bfl->count("double_blocks.1.img_attn.qkv.weight"));
  EXPECT_EQ(bfl->at("double_blocks.1.img_attn.qkv.weight").size(0), 3 * c.inner_dim());
  // Final layer halves are swapped relative to diffusers.
  at::Tensor d = diffusers.at("norm_out.linear.weight"), b = bfl->at("final_layer.adaLN_modulation.1.weight");
  EXPECT_TRUE(at::equal(b.narrow(0, 0, c.inner_dim()), d.narrow(0, c.inner_dim(), c.inner_dim())));
  auto back = BflToDiffusersStateDict(*bfl);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), diffusers.size());
  for (const auto& [k, v] : diffusers) EXPECT_TRUE(at::equal(back->at(k), v)) << k;
}

TEST(Flux2WeightsTest, DiffusersShardedAndBflGiveTheSameForward) {
  Flux2Config c = TinyFlux2Config();
  std::string dir = MakeTempDir("weights");
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "single"), 5).ok());
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "sharded"), 5, at::kFloat, /*max_shard_bytes=*/8000).ok());
  EXPECT_TRUE(PathExists(JoinPath(dir, "sharded/diffusion_pytorch_model.safetensors.index.json")));
  auto index = ReadFile(JoinPath(dir, "sharded/diffusion_pytorch_model.safetensors.index.json"));
  ASSERT_TRUE(index.ok());
  EXPECT_NE(index->find("diffusion_pytorch_model-00002-of-"), std::string::npos);  // really several shards
  auto bfl = DiffusersToBflStateDict(RandomFlux2StateDict(c, 5));
  ASSERT_TRUE(bfl.ok());
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "flux2.safetensors"), *bfl).ok());

  auto in = MakeTinyInputs(c, 2, 2, 3, 4, 1);
  auto single = Flux2Checkpoint::Open(JoinPath(dir, "single"));
  auto sharded = Flux2Checkpoint::Open(JoinPath(dir, "sharded"));
  auto bfl_ckpt = Flux2Checkpoint::Open(JoinPath(dir, "flux2.safetensors"), JoinPath(dir, "single/config.json"));
  ASSERT_TRUE(single.ok() && sharded.ok() && bfl_ckpt.ok()) << bfl_ckpt.status();
  EXPECT_FALSE((*single)->is_bfl());
  EXPECT_TRUE((*bfl_ckpt)->is_bfl());
  at::Tensor ref = ForwardFrom(**single, in);
  EXPECT_TRUE(at::equal(ForwardFrom(**sharded, in), ref));
  EXPECT_TRUE(at::equal(ForwardFrom(**bfl_ckpt, in), ref));
}

TEST(Flux2WeightsTest, BflFileWithoutConfigIsAClearError) {
  std::string dir = MakeTempDir("bflnocfg");
  auto bfl = DiffusersToBflStateDict(RandomFlux2StateDict(TinyFlux2Config(), 5));
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "f.safetensors"), *bfl).ok());
  auto ckpt = Flux2Checkpoint::Open(JoinPath(dir, "f.safetensors"));
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("--config"), std::string::npos) << ckpt.status();
}

TEST(Flux2WeightsTest, Bf16StoredWeightsConvertOnLoad) {
  Flux2Config c = TinyFlux2Config();
  std::string dir = MakeTempDir("bf16");
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "bf16"), 5, at::kBFloat16).ok());
  auto ckpt = Flux2Checkpoint::Open(JoinPath(dir, "bf16"));
  ASSERT_TRUE(ckpt.ok());
  auto stage = BuildFlux2Stage(**ckpt, Flux2StageRange::Full(c), at::kFloat, at::kCPU, nullptr, false);
  ASSERT_TRUE(stage.ok()) << stage.status();
  at::Tensor expect = RandomFlux2StateDict(c, 5, at::kBFloat16).at("proj_out.weight").to(at::kFloat);
  EXPECT_TRUE(at::equal((*stage)->named_parameters()["proj_out.weight"], expect));
  auto in = MakeTinyInputs(c, 1, 2, 2, 3, 1);
  // diffusers casts t to the compute dtype before ×1000, so use a t that bf16 holds exactly.
  in.timestep = at::full({1}, 0.5);
  in.guidance = at::full({1}, 1.0);
  at::Tensor bf16_out = ForwardFrom(**ckpt, in, at::kBFloat16);
  EXPECT_EQ(bf16_out.scalar_type(), at::kBFloat16);
  at::Tensor fp32_out = ForwardFrom(**ckpt, in, at::kFloat);
  // bf16 keeps ~3 significant digits; after 5 random blocks the outputs must still agree to a few percent.
  double rel = ((bf16_out.to(at::kFloat) - fp32_out).norm() / fp32_out.norm()).item<double>();
  EXPECT_LT(rel, 0.05);
  EXPECT_GT(rel, 0.0);  // and bf16 really ran in bf16
}

TEST(Flux2WeightsTest, BlockRangeReadsOnlyItsTensors) {
  // A file holding only block 3 (a single block) loads a stage of just that block: nothing else is read.
  Flux2Config c = TinyFlux2Config();
  std::string dir = MakeTempDir("range");
  auto all = RandomFlux2StateDict(c, 5);
  std::map<std::string, at::Tensor> part;
  for (const auto& [k, v] : all) {
    if (k.rfind("single_transformer_blocks.1.", 0) == 0) part[k] = v;
  }
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "diffusion_pytorch_model.safetensors"), part).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), Flux2ConfigToJson(c)).ok());
  auto ckpt = Flux2Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  auto stage = BuildFlux2Stage(**ckpt, {3, 4, false, false}, at::kFloat, at::kCPU, nullptr, false);
  ASSERT_TRUE(stage.ok()) << stage.status();
  EXPECT_TRUE(at::equal((*stage)->named_parameters()["single_transformer_blocks.1.attn.to_out.weight"],
                        all.at("single_transformer_blocks.1.attn.to_out.weight")));
}

TEST(Flux2WeightsTest, MismatchesAreListedInOneError) {
  Flux2Config c = TinyFlux2Config();
  std::string dir = MakeTempDir("bad");
  auto sd = RandomFlux2StateDict(c, 5);
  sd.erase("transformer_blocks.0.attn.to_q.weight");
  sd["proj_out.weight"] = at::zeros({3, 3});
  sd["transformer_blocks.0.attn.bogus.weight"] = at::zeros({1});
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "diffusion_pytorch_model.safetensors"), sd).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), Flux2ConfigToJson(c)).ok());
  auto ckpt = Flux2Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  auto stage = BuildFlux2Stage(**ckpt, Flux2StageRange::Full(c), at::kFloat, at::kCPU, nullptr, false);
  ASSERT_FALSE(stage.ok());
  std::string msg(stage.status().message());
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(msg.find("missing keys: transformer_blocks.0.attn.to_q.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("proj_out.weight (expected [4, 16], found [3, 3])"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected keys: transformer_blocks.0.attn.bogus.weight"), std::string::npos) << msg;
}

TEST(Flux2WeightsTest, MissingModelFileIsNotFound) {
  std::string dir = MakeTempDir("empty");
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), Flux2ConfigToJson(TinyFlux2Config())).ok());
  auto ckpt = Flux2Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Flux2Checkpoint::Open(JoinPath(dir, "nope")).ok());
}

TEST(Flux2ConfigTest, ParsesDiffusersConfigAndRejectsBadOnes) {
  auto c = ParseFlux2Config(R"({"_class_name": "Flux2Transformer2DModel", "num_layers": 5, "num_single_layers": 20,
      "num_attention_heads": 24, "joint_attention_dim": 7680, "guidance_embeds": false, "out_channels": null})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->inner_dim(), 3072);
  EXPECT_EQ(c->out_dim(), 128);
  EXPECT_FALSE(c->guidance_embeds);
  EXPECT_NEAR(static_cast<double>(c->TotalParams()) / 1e9, 3.88, 0.01);  // klein-4B
  auto bad_type = ParseFlux2Config(R"({"num_layers": "eight"})");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("num_layers"), std::string::npos);
  auto bad_rope = ParseFlux2Config(R"({"axes_dims_rope": [32, 32, 32]})");
  ASSERT_FALSE(bad_rope.ok());
  EXPECT_NE(bad_rope.status().message().find("axes_dims_rope"), std::string::npos);
  EXPECT_FALSE(ParseFlux2Config("not json").ok());
}

}  // namespace
}  // namespace baton
