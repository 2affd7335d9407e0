// FLUX.2 reference images in the model: Flux2Pipeline's position ids (_prepare_image_ids, scale 10), the reference
// tokens appended to the noisy target's, the head predicting the target's tokens only, and the constant that says so
// crossing the wire and every stage. (Against diffusers itself: tests/upstream/test_transformer.py and
// test_sample.py.)
#include <gtest/gtest.h>

#include "core/model/flux2_family.h"
#include "core/model/flux2_ops.h"
#include "core/model/flux2_weights.h"
#include "core/model/stage_io.h"
#include "core/testing/tiny_flux2.h"

namespace baton {
namespace {

using test_util::MakeTempDir;
using test_util::TinyFlux2Config;

TEST(Flux2ReferenceIdsTest, EachReferenceGetsTimeTenMoreThanTheLastAfterTheTarget) {
  // _prepare_image_ids([(1, C, 2, 3), (1, C, 1, 2)]): t = 10 + 10·i, then the reference's own (row, col), l = 0.
  const at::Tensor ids = ReferencePositionIds({{2, 3}, {1, 2}});
  const at::Tensor want = at::tensor({10, 0, 0, 0, 10, 0, 1, 0, 10, 0, 2, 0, 10, 1, 0, 0,
                                      10, 1, 1, 0, 10, 1, 2, 0, 20, 0, 0, 0, 20, 0, 1, 0},
                                     at::kLong)
                              .reshape({8, 4});
  EXPECT_TRUE(at::equal(ids, want)) << ids;
  EXPECT_EQ(ReferencePositionIds({}).size(0), 0);

  EXPECT_EQ(TargetTokens(ImagePositionIds(2, 3)), 0);  // no references: every token is the target's
  EXPECT_EQ(TargetTokens(at::cat({ImagePositionIds(2, 3), ids})), 6);
  EXPECT_THROW(TargetTokens(at::cat({ids, ImagePositionIds(2, 3)})), c10::Error);  // references come last
  EXPECT_THROW(TargetTokens(ids), c10::Error);                                     // no target at all
}

class Flux2ReferencesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("flux2_references");
    ASSERT_TRUE(WriteRandomFlux2Weights(config_, dir_, 7).ok());
    auto model = OpenModel(dir_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  // A batch of 2 on a 2x3 grid with two references of grids 2x3 and 1x2.
  NoisyBatch Batch() const {
    NoisyBatch b;
    b.noisy = at::randn({2, 6, config_.in_channels});
    b.prompt_embeds = at::randn({2, 5, config_.joint_attention_dim});
    b.timestep = at::full({2}, 0.4);
    b.grid_h = 2;
    b.grid_w = 3;
    b.guidance = 3.5;
    b.references = at::randn({2, 8, config_.in_channels});
    b.reference_grids = {{2, 3}, {1, 2}};
    return b;
  }
  static TensorMap Merged(const ShellOutputs& s) {
    TensorMap k = s.constants;
    for (const auto& [name, t] : s.tables) k[name] = t;
    return k;
  }
  const Flux2Config config_ = TinyFlux2Config();
  std::string dir_;
  std::unique_ptr<ModelFamily> model_;
};

TEST_F(Flux2ReferencesTest, InputsAppendTheReferencesAfterTheTargetAsFlux2PipelineDoes) {
  const NoisyBatch b = Batch();
  auto in = model_->MicroBatchInputs(b);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(at::equal(in->at("hidden_states"), at::cat({b.noisy, b.references}, 1)));
  EXPECT_TRUE(at::equal(in->at("img_ids"), at::cat({ImagePositionIds(2, 3), ReferencePositionIds(b.reference_grids)})));
  NoisyBatch bad = Batch();
  bad.reference_grids = {{2, 3}};  // 6 tokens named, 8 given
  auto refused = model_->MicroBatchInputs(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("reference latents are [2, 8, 4], expected [2, 6, 4]"), std::string::npos)
      << refused.status();
}

// The head predicts the target's 6 tokens, exactly the first 6 of what it would predict for all 14; two stages (split
// in the single blocks, the references riding in `joint`) give the one stage's output bitwise; the constant survives
// the wire's checks and names.
TEST_F(Flux2ReferencesTest, TheHeadPredictsTheTargetOnlyThroughEveryStage) {
  auto in = model_->MicroBatchInputs(Batch());
  ASSERT_TRUE(in.ok());
  auto shell = model_->BuildShell(at::kFloat, at::kCPU);
  ASSERT_TRUE(shell.ok());
  auto out = (*shell)->Run(*in, at::kFloat);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->constants.count("target_tokens"));
  EXPECT_EQ(out->constants.at("target_tokens").item<int64_t>(), 6);
  EXPECT_NE(out->tables_key.find("ids"), std::string::npos);  // not a plain grid's key
  EXPECT_TRUE(model_->CheckWire(WireKind::kConstants, out->constants, at::kFloat).ok());
  TensorMap bad_constants = out->constants;
  bad_constants["target_tokens"] = at::scalar_tensor(0, at::kLong);
  EXPECT_FALSE(model_->CheckWire(WireKind::kConstants, bad_constants, at::kFloat).ok());

  auto full = model_->BuildStage(model_->FullRange(), at::kFloat, at::kCPU, nullptr, false, WeightQuant::kNone);
  ASSERT_TRUE(full.ok());
  const at::Tensor got = (*full)->Forward(out->inputs, Merged(*out)).at("output");
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2, 6, config_.out_dim()}));
  TensorMap all_tokens = Merged(*out);
  all_tokens.erase("target_tokens");
  const at::Tensor every = (*full)->Forward(out->inputs, all_tokens).at("output");
  ASSERT_EQ(every.size(1), 14);
  EXPECT_TRUE(at::allclose(got, every.narrow(1, 0, 6), 1e-6, 1e-6));
  EXPECT_FALSE(at::allclose(got, every.narrow(1, 8, 6), 1e-3, 1e-3));

  auto first = model_->BuildStage({0, 3, true, false}, at::kFloat, at::kCPU, nullptr, false, WeightQuant::kNone);
  auto last = model_->BuildStage({3, 5, false, true}, at::kFloat, at::kCPU, nullptr, false, WeightQuant::kNone);
  ASSERT_TRUE(first.ok() && last.ok());
  const TensorMap act = (*first)->Forward(out->inputs, Merged(*out));
  EXPECT_EQ(act.at("joint").size(1), 5 + 14);
  EXPECT_TRUE(at::equal((*last)->Forward(act, Merged(*out)).at("output"), got));

  // The wire's own names: ConstantTensors / ConstantsFromTensors keep the count.
  Flux2Constants k;
  k.mod_img = out->constants.at("mod_img");
  k.mod_txt = out->constants.at("mod_txt");
  k.mod_single = out->constants.at("mod_single");
  k.mod_out = out->constants.at("mod_out");
  k.target_tokens = 6;
  auto back = ConstantsFromTensors(ConstantTensors(k, "key"), config_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->first.target_tokens, 6);
}

TEST_F(Flux2ReferencesTest, PlansCountReferenceTokensInEveryBlockButNotInTheHead) {
  PlanShape plain;
  plain.tokens = 4096 + 512;
  PlanShape edit = plain;
  edit.tokens += 4096;
  edit.reference_tokens = 4096;
  EXPECT_GT(model_->Block(0, edit).attention_macs, model_->Block(0, plain).attention_macs);
  EXPECT_DOUBLE_EQ(model_->Head(edit).extra_macs, model_->Head(plain).extra_macs);
}

}  // namespace
}  // namespace baton
