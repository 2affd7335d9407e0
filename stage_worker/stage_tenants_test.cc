// StageTenants: pipelines configured `shared` live side by side on one worker over one copy of the frozen weights,
// each with adapters of its own; a plain Configure gives the worker back to one pipeline; Release drops one.
#include "stage_worker/stage_tenants.h"

#include <gtest/gtest.h>

#include "core/lora/lora.h"
#include "core/model/flux2_weights.h"
#include "core/testing/tiny_flux2.h"
#include "rpc/frozen_key.h"

namespace baton {
namespace {

class StageTenantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::MakeTempDir("tenants");
    const Flux2Config config = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(config, dir_, 2).ok());
    StageRunnerOptions opts;
    opts.address = "test";
    opts.model_root = dir_;
    tenants_ = std::make_unique<StageTenants>(opts);
    base_.set_micro_batches(1);
    base_.set_num_stages(1);
    base_.set_model_path(dir_);
    base_.set_block_begin(0);
    base_.set_block_end(static_cast<int32_t>(config.num_blocks()));
    base_.set_has_embedders(true);
    base_.set_has_head(true);
    base_.mutable_lora()->set_rank(2);
    base_.mutable_lora()->set_alpha(2);
    auto targets = ResolveLoraTargets("attention");
    ASSERT_TRUE(targets.ok());
    for (const auto& t : *targets) base_.mutable_lora()->add_targets(t);
  }

  v1::ConfigureRequest Request(const std::string& job, uint64_t seed, bool shared) const {
    v1::ConfigureRequest req = base_;
    req.set_job_id(job);
    req.set_config_hash(job);
    req.set_seed(seed);
    req.set_shared(shared);
    return req;
  }
  // The first frozen tensor and the adapters of pipeline `job`.
  at::Tensor Frozen(const std::string& job) {
    auto frozen = tenants_->For(job)->FrozenFor(FrozenWeightsKey(base_, "cpu"));
    EXPECT_EQ(frozen.size(), 1u);
    return frozen.empty() ? at::Tensor() : frozen[0].begin()->second;
  }
  TensorMap Lora(const std::string& job) {
    auto lora = tenants_->For(job)->CurrentLora(job, job);
    EXPECT_TRUE(lora.ok()) << lora.status();
    return lora.value_or(TensorMap{});
  }

  std::string dir_;
  v1::ConfigureRequest base_;
  std::unique_ptr<StageTenants> tenants_;
};

TEST_F(StageTenantsTest, SharedPipelinesHoldTheirOwnAdaptersOverOneCopyOfTheFrozenWeights) {
  ASSERT_TRUE(tenants_->Configure(Request("a", 1, true)).ok());
  ASSERT_TRUE(tenants_->Configure(Request("b", 2, true)).ok());
  EXPECT_EQ(tenants_->size(), 2);
  EXPECT_NE(tenants_->For("a"), tenants_->For("b"));
  ASSERT_TRUE(Frozen("a").defined());
  EXPECT_EQ(Frozen("a").data_ptr(), Frozen("b").data_ptr()) << "the second pipeline loaded its own copy";
  const TensorMap a = Lora("a"), b = Lora("b");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  const std::string name = a.begin()->first;  // a lora_A: drawn from the seed
  EXPECT_FALSE(at::equal(a.at(name), b.at(name))) << "the pipelines share their adapters";
  // The adapters of "a" are those of "a" configured alone.
  StageRunnerOptions opts;
  opts.model_root = dir_;
  StageTenants alone(opts);
  ASSERT_TRUE(alone.Configure(Request("a", 1, false)).ok());
  auto solo = alone.For("a")->CurrentLora("a", "a");
  ASSERT_TRUE(solo.ok()) << solo.status();
  for (const auto& [n, t] : a) EXPECT_TRUE(at::equal(t, solo->at(n))) << n;
}

TEST_F(StageTenantsTest, APlainConfigureTakesTheWorkerAndReleaseDropsAPipeline) {
  ASSERT_TRUE(tenants_->Configure(Request("a", 1, true)).ok());
  ASSERT_TRUE(tenants_->Configure(Request("b", 2, true)).ok());
  tenants_->Release("b", "not b's hash");
  EXPECT_EQ(tenants_->size(), 2) << "a release must name the pipeline's hash";
  tenants_->Release("b", "b");
  EXPECT_EQ(tenants_->size(), 1);
  EXPECT_FALSE(tenants_->For("b")->CurrentLora("b", "b").ok()) << "b is still served";
  ASSERT_TRUE(tenants_->Configure(Request("b", 2, true)).ok());
  ASSERT_TRUE(tenants_->Configure(Request("c", 3, false)).ok());
  EXPECT_EQ(tenants_->size(), 1);
  EXPECT_TRUE(tenants_->For("c")->CurrentLora("c", "c").ok());
  EXPECT_FALSE(tenants_->For("a")->CurrentLora("a", "a").ok()) << "a plain Configure left another pipeline";
}

}  // namespace
}  // namespace baton
