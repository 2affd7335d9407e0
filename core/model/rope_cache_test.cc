#include "core/model/rope_cache.h"

#include <gtest/gtest.h>

#include "core/model/flux2_family.h"
#include "core/model/flux2_model.h"
#include "core/testing/tiny_flux2.h"

namespace baton {
namespace {

TEST(RopeTableCacheTest, EachKeyIsComputedOnceAndTheOldestLeaves) {
  RopeTableCache cache(2);
  auto tables = [](double v) { return [v] { return RopeTableCache::Tables{at::full({1}, v), at::full({1}, -v)}; }; };
  const RopeTableCache::Tables a = cache.Get("a", tables(1));
  EXPECT_TRUE(cache.Get("a", tables(9)).first.is_same(a.first)) << "a held key is not computed again";
  EXPECT_EQ(cache.computed(), 1);
  cache.Get("b", tables(2));
  cache.Get("c", tables(3));  // "a" leaves: two are held
  EXPECT_EQ(cache.Get("a", tables(4)).first.item<double>(), 4.0);
  EXPECT_EQ(cache.computed(), 4);
  EXPECT_EQ(cache.Get("c", tables(5)).first.item<double>(), 3.0);
}

// The FLUX.2 shell computes a grid's tables once, and they are the tables it computes afresh; position ids that are
// no grid key on their values: ids of the same shape with other values get their own tables.
TEST(RopeTableCacheTest, TheFlux2ShellKeepsEachGridsTablesAndKeysOtherIdsByValue) {
  const Flux2Config c = test_util::TinyFlux2Config();
  Flux2Shell shell(c, at::TensorOptions());
  test_util::LoadRandomWeights(*shell, c, 3);
  const std::unique_ptr<ShellModel> model = WrapFlux2Shell(shell, c);
  auto run = [&](const test_util::TinyInputs& in) {
    TensorMap inputs = {{"hidden_states", in.hidden_states},
                        {"encoder_hidden_states", in.encoder_hidden_states},
                        {"timestep", in.timestep},
                        {"img_ids", in.img_ids},
                        {"txt_ids", in.txt_ids}};
    if (c.guidance_embeds) inputs["guidance"] = in.guidance;
    auto out = model->Run(inputs, at::kFloat);
    EXPECT_TRUE(out.ok()) << out.status();
    return *out;
  };
  const test_util::TinyInputs first = test_util::MakeTinyInputs(c, 1, 2, 3, 4, 1);
  const ShellOutputs a = run(first), b = run(test_util::MakeTinyInputs(c, 1, 2, 3, 4, 2));
  EXPECT_EQ(a.tables_key, b.tables_key);
  EXPECT_TRUE(a.tables.at("rope_cos").is_same(b.tables.at("rope_cos")));
  const auto [cos, sin] = shell->Rope(first.img_ids, first.txt_ids);
  EXPECT_TRUE(at::equal(a.tables.at("rope_cos"), cos) && at::equal(a.tables.at("rope_sin"), sin));

  test_util::TinyInputs shifted = first;
  shifted.img_ids = first.img_ids.clone();
  shifted.img_ids.select(1, 3).add_(5);  // no grid of the training layout: keyed by value
  const ShellOutputs s = run(shifted);
  EXPECT_NE(s.tables_key, a.tables_key);
  const auto [shifted_cos, unused] = shell->Rope(shifted.img_ids, shifted.txt_ids);
  EXPECT_TRUE(at::equal(s.tables.at("rope_cos"), shifted_cos));
  shifted.img_ids.select(1, 3).add_(1);  // the same shape, other values: other tables
  const ShellOutputs t = run(shifted);
  EXPECT_NE(t.tables_key, s.tables_key);
  EXPECT_FALSE(at::equal(t.tables.at("rope_cos"), s.tables.at("rope_cos")));
}

}  // namespace
}  // namespace baton
