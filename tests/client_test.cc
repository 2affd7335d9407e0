// The baton CLI's model commands, run in-process through RunClient exactly as a user types them.
#include <gtest/gtest.h>

#include "client/commands.h"
#include "core/model/flux2_model.h"
#include "core/model/flux2_weights.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/common.h"
#include "core/util/files.h"

namespace baton {
namespace {

TEST(ClientTest, InitWeightsThenForwardMatchesTheLibraryInBothFormats) {
  std::string dir = test_util::MakeTempDir("client");
  Flux2Config c = test_util::TinyFlux2Config();
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), Flux2ConfigToJson(c)).ok());
  const std::string config = JoinPath(dir, "config.json");
  ASSERT_EQ(RunClient({"init-weights", "--config", config, "--out", JoinPath(dir, "model"), "--seed", "4"}), 0);
  ASSERT_EQ(RunClient({"init-weights", "--config", config, "--out", JoinPath(dir, "flux2.safetensors"), "--seed", "4",
                       "--format", "bfl"}),
            0);
  auto in = test_util::MakeTinyInputs(c, 1, 2, 3, 4, 6);
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "in.safetensors"), {{"hidden_states", in.hidden_states},
                                                                 {"encoder_hidden_states", in.encoder_hidden_states},
                                                                 {"timestep", in.timestep},
                                                                 {"guidance", in.guidance},
                                                                 {"img_ids", in.img_ids},
                                                                 {"txt_ids", in.txt_ids}})
                  .ok());
  ASSERT_EQ(RunClient({"forward", "--model", JoinPath(dir, "model"), "--inputs", JoinPath(dir, "in.safetensors"),
                       "--output", JoinPath(dir, "out.safetensors")}),
            0);
  ASSERT_EQ(RunClient({"forward", "--model", JoinPath(dir, "flux2.safetensors"), "--config", config, "--inputs",
                       JoinPath(dir, "in.safetensors"), "--output", JoinPath(dir, "out_bfl.safetensors")}),
            0);
  auto out = LoadAllSafetensors(JoinPath(dir, "out.safetensors"));
  auto out_bfl = LoadAllSafetensors(JoinPath(dir, "out_bfl.safetensors"));
  ASSERT_TRUE(out.ok() && out_bfl.ok());

  auto ckpt = Flux2Checkpoint::Open(JoinPath(dir, "model"));
  ASSERT_TRUE(ckpt.ok());
  auto shell = BuildFlux2Shell(**ckpt, at::kFloat, at::kCPU);
  auto stage = BuildFlux2Stage(**ckpt, Flux2StageRange::Full(c), at::kFloat, at::kCPU, nullptr, false);
  ASSERT_TRUE(shell.ok() && stage.ok());
  at::NoGradGuard no_grad;
  at::Tensor expect = Flux2Forward(*shell, *stage, in.hidden_states, in.encoder_hidden_states, in.timestep, in.guidance,
                                   in.img_ids, in.txt_ids);
  EXPECT_TRUE(at::equal(out->at("output"), expect));
  EXPECT_TRUE(at::equal(out_bfl->at("output"), expect));

  // A missing input is a clear failure, not a crash.
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "bad.safetensors"), {{"hidden_states", in.hidden_states}}).ok());
  EXPECT_EQ(RunClient({"forward", "--model", JoinPath(dir, "model"), "--inputs", JoinPath(dir, "bad.safetensors"),
                       "--output", JoinPath(dir, "x.safetensors")}),
            1);
  EXPECT_EQ(RunClient({"forward", "--bogus"}), 2);
  // Inputs of the wrong rank (a rank-0 img_ids used to abort): exit 1 with a message, not a crash.
  for (auto [key, t] : {std::pair<const char*, at::Tensor>{"img_ids", at::zeros({})},
                        {"txt_ids", at::zeros({6, 2})},
                        {"timestep", at::zeros({2, 2})}}) {
    std::map<std::string, at::Tensor> bad = {{"hidden_states", in.hidden_states},
                                             {"encoder_hidden_states", in.encoder_hidden_states},
                                             {"timestep", in.timestep},
                                             {"guidance", in.guidance},
                                             {"img_ids", in.img_ids},
                                             {"txt_ids", in.txt_ids}};
    bad[key] = t;
    ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "rank.safetensors"), bad).ok());
    EXPECT_EQ(RunClient({"forward", "--model", JoinPath(dir, "model"), "--inputs", JoinPath(dir, "rank.safetensors"),
                         "--output", JoinPath(dir, "x.safetensors")}),
              1)
        << key;
  }
}

// `baton quantize` from a BFL single file, then `baton forward` on the result == `baton forward --quantize`
// on the source, bit for bit; fp8 over the int8 folder is refused (exit 1).
TEST(ClientTest, QuantizeThenForwardEqualsForwardQuantize) {
  std::string dir = test_util::MakeTempDir("client_quant");
  Flux2Config c = test_util::TinyFlux2Config();
  const std::string config = JoinPath(dir, "config.json");
  ASSERT_TRUE(WriteFileAtomic(config, Flux2ConfigToJson(c)).ok());
  const std::string bfl = JoinPath(dir, "flux2.safetensors");
  ASSERT_EQ(RunClient({"init-weights", "--config", config, "--out", bfl, "--seed", "2", "--format", "bfl"}), 0);
  auto in = test_util::MakeTinyInputs(c, 1, 2, 3, 4, 6);
  const std::string inputs = JoinPath(dir, "in.safetensors");
  ASSERT_TRUE(WriteSafetensors(inputs, {{"hidden_states", in.hidden_states},
                                        {"encoder_hidden_states", in.encoder_hidden_states},
                                        {"timestep", in.timestep},
                                        {"guidance", in.guidance},
                                        {"img_ids", in.img_ids},
                                        {"txt_ids", in.txt_ids}})
                  .ok());
  const std::string q = JoinPath(dir, "int8");
  ASSERT_EQ(RunClient({"quantize", "--model", bfl, "--config", config, "--out", q, "--quantize", "int8"}), 0);
  ASSERT_EQ(RunClient({"forward", "--model", bfl, "--config", config, "--inputs", inputs, "--output",
                       JoinPath(dir, "a.safetensors"), "--quantize", "int8"}),
            0);
  ASSERT_EQ(RunClient({"forward", "--model", q, "--inputs", inputs, "--output", JoinPath(dir, "b.safetensors")}), 0);
  ASSERT_EQ(RunClient({"forward", "--model", bfl, "--config", config, "--inputs", inputs, "--output",
                       JoinPath(dir, "full.safetensors")}),
            0);
  auto a = LoadAllSafetensors(JoinPath(dir, "a.safetensors"));
  auto b = LoadAllSafetensors(JoinPath(dir, "b.safetensors"));
  auto full = LoadAllSafetensors(JoinPath(dir, "full.safetensors"));
  ASSERT_TRUE(a.ok() && b.ok() && full.ok());
  EXPECT_TRUE(at::equal(a->at("output"), b->at("output")));
  EXPECT_FALSE(at::equal(a->at("output"), full->at("output")));
  EXPECT_EQ(RunClient({"forward", "--model", q, "--inputs", inputs, "--output", JoinPath(dir, "c.safetensors"),
                       "--quantize", "fp8"}),
            1);
  EXPECT_EQ(RunClient({"quantize", "--model", q, "--out", JoinPath(dir, "x"), "--quantize", "none"}), 1);
}

TEST(ClientTest, PlanSaysWhenFlux2DevDoesNotFit) {
  const std::string config = JoinPath(test_util::SourceDir(), "configs/models/flux2-dev.json");
  EXPECT_EQ(RunClient({"plan", "--model-config", config, "--stages", "2", "--memory-per-stage", "24GB"}), 1);
  EXPECT_EQ(RunClient({"plan", "--model-config", config, "--stages", "4", "--memory-per-stage", "24GB"}), 0);
  // With 8-bit block weights two 24 GB cards do (the planner recomputes where it must); bad values are refused.
  EXPECT_EQ(RunClient({"plan", "--model-config", config, "--stages", "2", "--memory-per-stage", "24GB", "--quantize",
                       "int8"}),
            0);
  EXPECT_EQ(RunClient({"plan", "--model-config", config, "--stages", "2", "--quantize", "int4"}), 1);
  EXPECT_EQ(RunClient({"plan", "--model-config", config, "--stages", "2", "--recompute", "maybe"}), 1);
  EXPECT_EQ(RunClient({"plan", "--model-config", config, "--stages", "2", "--device", "tpu"}), 1);
  EXPECT_EQ(RunClient({"schedule", "--stages", "4", "--micro-batches", "8", "--kind", "1f1b"}), 0);
  EXPECT_EQ(RunClient({"schedule", "--stages", "4", "--micro-batches", "8", "--kind", "interleaved", "--chunks", "2"}),
            0);
  // Interleaving needs micro-batches in multiples of the stages, and --chunks only goes with it.
  EXPECT_EQ(RunClient({"schedule", "--stages", "4", "--micro-batches", "6", "--kind", "interleaved", "--chunks", "2"}),
            1);
  EXPECT_EQ(RunClient({"schedule", "--stages", "4", "--micro-batches", "8", "--kind", "1f1b", "--chunks", "2"}), 1);
}

}  // namespace
}  // namespace baton
