// Every adapter type in the original (ComfyUI) naming (original_adapters.h): the ΔW each original module gets from
// the file, by the formulas LyCORIS and ComfyUI apply, equals the ΔW of the diffusers modules it holds (fused qkv
// stacked, FLUX.2's final-layer halves swapped); reading the file back gives the same adapters, block-diagonal parts
// at their own rank; what cannot be written or read is an error that names it. The referee against lycoris-lora on
// a BFL-named model is tests/upstream/test_lora_variants.py.
#include "core/lora/original_adapters.h"

#include <gtest/gtest.h>

#include "core/keys/flux2_keys.h"
#include "core/lora/wan_lora_names.h"

namespace baton {
namespace {

constexpr int64_t kHidden = 8, kRank = 2;

at::Tensor Random(std::vector<int64_t> shape) { return at::randn(shape, at::kDouble); }

// A random adapter of `type` on a Linear in → out (every factor non-zero), scale 0.75.
LoraWeights RandomAdapter(AdapterType type, int64_t in, int64_t out) {
  LoraWeights w;
  w.type = type;
  w.scale = 0.75;
  switch (type) {
    case AdapterType::kLora:
    case AdapterType::kDora:
      w.A = Random({kRank, in});
      w.B = Random({out, kRank});
      if (type == AdapterType::kDora) w.other["lora_magnitude_vector"] = Random({out}).abs() + 0.5;
      break;
    case AdapterType::kLoha:
      w.other = {{"hada_w1_a", Random({out, kRank})},
                 {"hada_w1_b", Random({kRank, in})},
                 {"hada_w2_a", Random({out, kRank})},
                 {"hada_w2_b", Random({kRank, in})}};
      break;
    case AdapterType::kLokr:  // out = 2·(out/2), in = 2·(in/2): w1 [2, 2], w2 decomposed
      w.other = {
          {"lokr_w1", Random({2, 2})}, {"lokr_w2_a", Random({out / 2, kRank})}, {"lokr_w2_b", Random({kRank, in / 2})}};
      break;
  }
  return w;
}

// ΔW by each type's formula (adapter_type.h), scale applied.
at::Tensor Delta(const LoraWeights& w) {
  auto o = [&](const char* n) { return w.other.at(n).to(at::kDouble); };
  switch (w.type) {
    case AdapterType::kLoha:
      return w.scale * at::mm(o("hada_w1_a"), o("hada_w1_b")) * at::mm(o("hada_w2_a"), o("hada_w2_b"));
    case AdapterType::kLokr:
      return w.scale *
             at::kron(o("lokr_w1"), w.other.count("lokr_w2") ? o("lokr_w2") : at::mm(o("lokr_w2_a"), o("lokr_w2_b")));
    default:
      return w.scale * at::mm(w.B.to(at::kDouble), w.A.to(at::kDouble));
  }
}

// ΔW of one original module from the file's tensors, as ComfyUI applies them: ".alpha" / rank where the file has it.
at::Tensor OriginalDelta(const std::map<std::string, at::Tensor>& sd, const std::string& module) {
  const std::string base = "diffusion_model." + module + ".";
  auto t = [&](const std::string& n) { return sd.at(base + n).to(at::kDouble); };
  const bool alpha = sd.count(base + "alpha") > 0;
  if (sd.count(base + "hada_w1_a")) {
    const double s = alpha ? t("alpha").item<double>() / t("hada_w1_b").size(0) : 1.0;
    return s * at::mm(t("hada_w1_a"), t("hada_w1_b")) * at::mm(t("hada_w2_a"), t("hada_w2_b"));
  }
  if (sd.count(base + "lokr_w1")) {
    const double s = alpha ? t("alpha").item<double>() / t("lokr_w2_b").size(0) : 1.0;
    return s * at::kron(t("lokr_w1"), at::mm(t("lokr_w2_a"), t("lokr_w2_b")));
  }
  EXPECT_FALSE(alpha) << module << ": plain and DoRA files fold the scale into lora_B";
  return at::mm(t("lora_B.weight"), t("lora_A.weight"));
}

struct Case {
  std::string module;  // diffusers
  int64_t out;
};

// FLUX.2 modules of every kind: fused qkv (img and txt), one-to-one, single blocks, the swapped final layer.
std::vector<Case> Flux2Modules(bool with_qkv) {
  std::vector<Case> cases = {{"transformer_blocks.0.attn.to_out.0", kHidden},
                             {"single_transformer_blocks.1.attn.to_qkv_mlp_proj", 4 * kHidden},
                             {"norm_out.linear", 2 * kHidden}};
  if (with_qkv) {
    for (const char* m : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"}) {
      cases.push_back({std::string("transformer_blocks.0.attn.") + m, kHidden});
    }
  }
  return cases;
}

class OriginalAdaptersTest : public ::testing::TestWithParam<AdapterType> {};

TEST_P(OriginalAdaptersTest, Flux2OriginalModulesGetTheDiffusersDeltasAndReadBackExactly) {
  at::manual_seed(3);
  const AdapterType type = GetParam();
  const bool fusable = type != AdapterType::kLokr;
  std::map<std::string, LoraWeights> adapters;
  for (const auto& c : Flux2Modules(fusable)) adapters[c.module] = RandomAdapter(type, kHidden, c.out);
  auto sd = AdaptersToOriginal(adapters, Flux2OriginalNaming());
  ASSERT_TRUE(sd.ok()) << sd.status();
  for (const auto& [key, t] : *sd) EXPECT_EQ(t.scalar_type(), at::kFloat) << key;

  // Each BFL module's ΔW holds its diffusers modules' ΔWs: stacked (qkv), swapped halves (norm_out.linear).
  std::map<std::string, std::vector<at::Tensor>> expected;  // BFL module → ΔW chunks in order
  for (const auto& [module, w] : adapters) {
    auto loc = DiffusersToBfl(module);
    ASSERT_TRUE(loc.has_value()) << module;
    auto& chunks = expected[loc->key];
    chunks.resize(loc->num_chunks);
    chunks[loc->chunk] = loc->swap_halves ? SwapHalves(Delta(w)) : Delta(w);
  }
  for (const auto& [bfl, chunks] : expected) {
    EXPECT_TRUE(at::allclose(OriginalDelta(*sd, bfl), at::cat(chunks, 0), 1e-6, 1e-6)) << bfl;
  }
  if (type == AdapterType::kDora) {  // the magnitudes, stacked and swapped as the rows
    EXPECT_TRUE(at::allclose(sd->at("diffusion_model.double_blocks.0.img_attn.qkv.dora_scale").to(at::kDouble).view(-1),
                             at::cat({adapters["transformer_blocks.0.attn.to_q"].other["lora_magnitude_vector"],
                                      adapters["transformer_blocks.0.attn.to_k"].other["lora_magnitude_vector"],
                                      adapters["transformer_blocks.0.attn.to_v"].other["lora_magnitude_vector"]}),
                             1e-6, 1e-6));
    EXPECT_EQ(sd->at("diffusion_model.final_layer.adaLN_modulation.1.dora_scale").sizes(),
              at::IntArrayRef({2 * kHidden, 1}));
  }

  // The same from the adapters' parameters by PEFT name (what a run saves with save_bfl).
  auto from_params = LoraTensorsBfl(LoraWeightsToParameters(adapters, 0.75), 0.75);
  ASSERT_TRUE(from_params.ok()) << from_params.status();
  ASSERT_EQ(from_params->size(), sd->size());
  for (const auto& [key, t] : *sd) EXPECT_TRUE(at::allclose(from_params->at(key), t, 1e-6, 1e-6)) << key;

  auto back = AdaptersFromOriginal("f.safetensors", *sd, Flux2OriginalNaming());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), adapters.size());
  for (const auto& [module, w] : adapters) {
    const LoraWeights& got = back->at(module);
    EXPECT_EQ(got.type, type) << module;
    EXPECT_TRUE(at::allclose(Delta(got), Delta(w), 1e-6, 1e-6)) << module;
    for (const auto& [name, t] : w.other) {  // block-diagonal parts come back at their own rank
      EXPECT_EQ(got.other.at(name).sizes(), t.sizes()) << module << " " << name;
      if (name == "lora_magnitude_vector") EXPECT_TRUE(at::allclose(got.other.at(name).to(at::kDouble), t)) << module;
    }
    if (w.A.defined()) EXPECT_EQ(got.A.sizes(), w.A.sizes()) << module;
  }
}

INSTANTIATE_TEST_SUITE_P(EachType, OriginalAdaptersTest,
                         ::testing::Values(AdapterType::kLora, AdapterType::kDora, AdapterType::kLoha,
                                           AdapterType::kLokr),
                         [](const auto& info) { return std::string(AdapterTypeName(info.param)); });

TEST(OriginalAdaptersNamingTest, ALokrAcrossFusedLinearsIsAnErrorThatSaysWhy) {
  std::map<std::string, LoraWeights> adapters;
  for (const char* m : {"to_q", "to_k", "to_v"}) {
    adapters[std::string("transformer_blocks.0.attn.") + m] = RandomAdapter(AdapterType::kLokr, kHidden, kHidden);
  }
  auto sd = AdaptersToOriginal(adapters, Flux2OriginalNaming());
  ASSERT_FALSE(sd.ok());
  EXPECT_NE(sd.status().message().find("double_blocks.0.img_attn.qkv"), std::string::npos) << sd.status();
  EXPECT_NE(sd.status().message().find("Kronecker products stacked are not one"), std::string::npos) << sd.status();
  // One of three fused parts alone has no original naming either (any type).
  adapters = {{"transformer_blocks.0.attn.to_q", RandomAdapter(AdapterType::kLora, kHidden, kHidden)}};
  sd = AdaptersToOriginal(adapters, Flux2OriginalNaming());
  ASSERT_FALSE(sd.ok());
  EXPECT_NE(sd.status().message().find("adapter 1 of them is missing"), std::string::npos) << sd.status();
}

TEST(OriginalAdaptersNamingTest, ALokrWithAFullW2GetsTheAlphaLycorisNeedsAndReadsBackAtScaleOne) {
  at::manual_seed(7);
  LoraWeights w;
  w.type = AdapterType::kLokr;
  w.scale = 0.5;
  w.other = {{"lokr_w1", Random({2, 2})}, {"lokr_w2", Random({kHidden / 2, kHidden / 2})}};
  auto sd = AdaptersToOriginal({{"transformer_blocks.0.attn.to_out.0", w}}, Flux2OriginalNaming());
  ASSERT_TRUE(sd.ok()) << sd.status();
  EXPECT_EQ(sd->at("diffusion_model.double_blocks.0.img_attn.proj.alpha").item<float>(), 1.0f);
  auto back = AdaptersFromOriginal("f.safetensors", *sd, Flux2OriginalNaming());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->at("transformer_blocks.0.attn.to_out.0").scale, 1.0);
  EXPECT_TRUE(at::allclose(Delta(back->at("transformer_blocks.0.attn.to_out.0")), Delta(w), 1e-6, 1e-6));
}

TEST(OriginalAdaptersNamingTest, WanModulesKeepTheirShapeUnderTheOriginalNames) {
  at::manual_seed(5);
  std::map<std::string, LoraWeights> adapters = {
      {"blocks.0.attn2.add_k_proj", RandomAdapter(AdapterType::kLoha, kHidden, kHidden)},
      {"blocks.1.ffn.net.0.proj", RandomAdapter(AdapterType::kLoha, kHidden, 2 * kHidden)}};
  auto sd = AdaptersToOriginal(adapters, WanOriginalNaming());
  ASSERT_TRUE(sd.ok()) << sd.status();
  EXPECT_TRUE(at::allclose(OriginalDelta(*sd, "blocks.0.cross_attn.k_img"),
                           Delta(adapters["blocks.0.attn2.add_k_proj"]), 1e-6, 1e-6));
  EXPECT_EQ(sd->at("diffusion_model.blocks.1.ffn.0.alpha").item<float>(), static_cast<float>(kRank));
  auto back = AdaptersFromOriginal("w.safetensors", *sd, WanOriginalNaming());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(
      at::allclose(Delta(back->at("blocks.1.ffn.net.0.proj")), Delta(adapters["blocks.1.ffn.net.0.proj"]), 1e-6, 1e-6));
}

TEST(OriginalAdaptersNamingTest, BadFilesAreErrorsNamingTheKey) {
  auto read = [](std::map<std::string, at::Tensor> sd) {
    auto got = AdaptersFromOriginal("bad.safetensors", sd, Flux2OriginalNaming());
    return got.ok() ? std::string("read") : std::string(got.status().message());
  };
  const std::string proj = "diffusion_model.double_blocks.0.img_attn.proj.";
  EXPECT_NE(read({{proj + "lora_A.weight", at::ones({2, 8})},
                  {proj + "lora_B.weight", at::ones({8, 2})},
                  {proj + "dora_scale", at::ones({3, 1})}})
                .find("dora_scale is [3, 1], want [8, 1]"),
            std::string::npos);
  EXPECT_NE(read({{proj + "lora_up.weight", at::ones({8, 2})}}).find("not an original-naming adapter key"),
            std::string::npos);
  EXPECT_NE(read({{proj + "hada_w1_a", at::ones({8, 2})}}).find("lacks hada_w1_b"), std::string::npos);
  EXPECT_NE(read({{"diffusion_model.double_blocks.0.img_attn.nope.lokr_w1", at::ones({2, 2})},
                  {"diffusion_model.double_blocks.0.img_attn.nope.lokr_w2", at::ones({4, 4})}})
                .find("unknown original LoRA module double_blocks.0.img_attn.nope"),
            std::string::npos);
  // A fused LoKr splits only when its w1 rows divide among q, k and v.
  const std::string qkv = "diffusion_model.double_blocks.0.img_attn.qkv.";
  EXPECT_NE(read({{qkv + "lokr_w1", at::ones({2, 2})}, {qkv + "lokr_w2", at::ones({12, 4})}})
                .find("lokr_w1 has 2 rows, not a multiple of 3"),
            std::string::npos);
  EXPECT_EQ(read({{qkv + "lokr_w1", at::ones({3, 2})}, {qkv + "lokr_w2", at::ones({8, 4})}}), "read");
}

TEST(OriginalAdaptersNamingTest, LycorisUnderscoredNamesResolveToModules) {
  EXPECT_EQ(Flux2ModuleFromUnderscored("transformer_blocks_0_attn_to_out_0"), "transformer_blocks.0.attn.to_out.0");
  EXPECT_EQ(Flux2ModuleFromUnderscored("single_transformer_blocks_12_attn_to_qkv_mlp_proj"),
            "single_transformer_blocks.12.attn.to_qkv_mlp_proj");
  EXPECT_EQ(Flux2ModuleFromUnderscored("norm_out_linear"), "norm_out.linear");
  EXPECT_EQ(Flux2ModuleFromUnderscored("transformer_blocks_x_attn_to_q"), std::nullopt);
  EXPECT_EQ(Flux2ModuleFromUnderscored("blocks_0_attn1_to_q"), std::nullopt);
  EXPECT_EQ(WanModuleFromUnderscored("blocks_3_attn2_add_k_proj"), "blocks.3.attn2.add_k_proj");
  EXPECT_EQ(WanModuleFromUnderscored("condition_embedder_time_proj"), "condition_embedder.time_proj");
  EXPECT_EQ(WanModuleFromUnderscored("transformer_blocks_0_attn_to_q"), std::nullopt);
}

}  // namespace
}  // namespace baton
