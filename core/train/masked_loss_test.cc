// Masked loss on the trainer's side: the weighted loss against a hand computation, the records' masks in a
// micro-batch (ones where a record has none), and what each family sends to its last stage.
#include <gtest/gtest.h>

#include "core/data/cache.h"
#include "core/model/flux2_family.h"
#include "core/model/wan_family.h"
#include "core/model/wan_i2v.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/util/files.h"

namespace baton {
namespace {

TEST(MaskedLossTest, TheLossIsTheMaskWeightedMeanOfTheSquaredErrors) {
  const at::Tensor pred = at::tensor({1.0f, 2.0f, 0.0f, 1.0f, 3.0f, 3.0f, -1.0f, 0.0f}).reshape({1, 4, 2});
  const at::Tensor target = at::zeros({1, 4, 2});
  const at::Tensor mask = at::tensor({1.0f, 0.5f, 0.0f, 0.25f}).reshape({1, 4, 1});
  // Per token Σ_c (p − t)²: 5, 1, 18, 1; weighted: 5 + 0.5 + 0 + 0.25 = 5.75 over Σ w · C = 1.75 · 2.
  EXPECT_NEAR(FlowMatchingLoss(pred, target, mask).item<double>(), 5.75 / 3.5, 1e-7);
  EXPECT_NEAR(FlowMatchingLoss(pred, target).item<double>(), 25.0 / 8, 1e-7);

  // Two records in one micro-batch: each its own weighted mean, then their mean, so a record with one weighted token
  // weighs what it weighs alone (not 1/17 of the pair's weights): the same loss however the batch is cut.
  const at::Tensor pair_pred = at::cat({pred, pred * 2});
  const at::Tensor pair_mask = at::cat({mask, at::ones({1, 4, 1})});
  const double first = 5.75 / 3.5, second = 4.0 * 25.0 / 8;
  EXPECT_NEAR(FlowMatchingLoss(pair_pred, at::zeros({2, 4, 2}), pair_mask).item<double>(), (first + second) / 2, 1e-6);
}

// A cache of 4 records on a 2 x 2 grid, records 1 and 3 with a mask; micro-batches of 2.
TEST(MaskedLossTest, AMicroBatchCarriesItsRecordsMasksAsTokenWeights) {
  const std::string dir = test_util::MakeTempDir("masked_loss");
  const Flux2Config c = test_util::TinyFlux2Config();
  ASSERT_TRUE(WriteSyntheticCache(dir, c.in_channels, c.joint_attention_dim, 4, {{2, 2}}, 5, 1).ok());
  auto index = ReadCacheIndex(dir);
  ASSERT_TRUE(index.ok());
  std::map<int64_t, at::Tensor> masks = {{1, at::tensor({1.0f, 0.0f, 0.5f, 1.0f}).reshape({2, 2})},
                                         {3, at::tensor({0.0f, 0.0f, 0.0f, 1.0f}).reshape({2, 2})}};
  auto reader = CacheReader::Open(dir);
  for (const auto& [i, mask] : masks) {
    CacheSample s = *(*reader)->Load(static_cast<size_t>(i));
    s.loss_mask = mask;
    const CacheRecordInfo& r = index->records[static_cast<size_t>(i)];
    auto info = WriteCacheRecord(dir, r.id, r.hash, index->encoder, s);
    ASSERT_TRUE(info.ok()) << info.status();
    index->records[static_cast<size_t>(i)] = *info;
  }
  ASSERT_TRUE(WriteCacheIndex(dir, *index).ok());
  reader = CacheReader::Open(dir);
  ASSERT_TRUE(reader.ok());
  auto job = ParseJobYaml(absl::StrCat("model: m\ndataset: ", dir, "\nbatch_size: 2\nseed: 1\n"));
  ASSERT_TRUE(job.ok());
  Flux2Family family(c, nullptr);
  auto sampler = StepSampler::Create(reader->get(), *job, &family);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  bool saw_masked = false;
  for (int64_t step = 0; step < 4; ++step) {
    const MicroBatch mb = (*sampler->Step(step))[0];
    const bool any = masks.count(mb.samples[0]) || masks.count(mb.samples[1]);
    ASSERT_EQ(mb.loss_mask.defined(), any) << "step " << step;
    if (!any) continue;
    saw_masked = true;
    ASSERT_EQ(mb.loss_mask.sizes(), (std::vector<int64_t>{2, 4, 1}));
    for (int64_t j = 0; j < 2; ++j) {
      const at::Tensor want = masks.count(mb.samples[j]) ? masks.at(mb.samples[j]).reshape({4, 1}) : at::ones({4, 1});
      EXPECT_TRUE(at::equal(mb.loss_mask[j], want)) << "record " << mb.samples[j];
    }
    EXPECT_TRUE(
        family.CheckWire(WireKind::kTarget, {{"target", mb.target}, {"loss_mask", mb.loss_mask}}, at::kFloat).ok());
  }
  EXPECT_TRUE(saw_masked);
  // The FLUX.2 wire takes [b, Si, 1] beside the target, nothing else.
  const at::Tensor target = at::zeros({2, 4, c.out_dim()});
  EXPECT_FALSE(
      family.CheckWire(WireKind::kTarget, {{"target", target}, {"loss_mask", at::ones({2, 4, 2})}}, at::kFloat).ok());
  EXPECT_FALSE(family.CheckWire(WireKind::kTarget, {{"target", target}, {"extra", target}}, at::kFloat).ok());
}

TEST(MaskedLossTest, WanWeightsEveryFrameAlikeAndKeepsTheCleanFirstFrameOut) {
  WanConfig c;
  c.num_attention_heads = 2;
  c.attention_head_dim = 12;
  c.in_channels = c.out_channels = 4;
  WanFamily family(c);
  NoisyBatch batch;
  batch.noisy = at::zeros({2, 4, 3, 2, 2});
  batch.loss_weights = at::rand({2, 2, 2});
  const at::Tensor spatial = family.LossMask(batch);
  ASSERT_EQ(spatial.sizes(), (std::vector<int64_t>{2, 1, 1, 2, 2}));
  EXPECT_TRUE(at::equal(spatial.squeeze(1).squeeze(1), batch.loss_weights));
  batch.conditioning = kWanCleanFirstFrame;
  const at::Tensor both = family.LossMask(batch);
  ASSERT_EQ(both.sizes(), (std::vector<int64_t>{2, 1, 3, 2, 2}));
  EXPECT_EQ(both.select(2, 0).abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(at::equal(both.select(2, 2).squeeze(1), batch.loss_weights));
  const at::Tensor target = at::zeros({2, 4, 3, 2, 2});
  for (const at::Tensor& mask : {spatial, both}) {
    EXPECT_TRUE(family.CheckWire(WireKind::kTarget, {{"target", target}, {"loss_mask", mask}}, at::kFloat).ok());
  }
  EXPECT_FALSE(
      family.CheckWire(WireKind::kTarget, {{"target", target}, {"loss_mask", at::ones({2, 1, 1, 3, 2})}}, at::kFloat)
          .ok());
}

}  // namespace
}  // namespace baton
