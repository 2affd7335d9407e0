// Config parsing, checkpoint layouts and layer-by-layer loading of the text encoder.
#include "core/text/text_encoder_checkpoint.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/tensor/safetensors.h"
#include "core/text/text_encoder.h"
#include "core/util/files.h"

namespace baton {
namespace {

std::string FreshCheckpointDir(const std::string& name) {
  std::string dir = JoinPath(::testing::TempDir(), absl::StrCat("text_encoder_ckpt_test_", name, "_", getpid()));
  EXPECT_TRUE(RemoveAll(dir).ok());
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

std::vector<std::string> KeysOf(const std::string& file) {
  auto f = SafetensorsFile::Open(file);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? (*f)->Keys() : std::vector<std::string>();
}

bool AnyKeyStartsWith(const std::vector<std::string>& keys, const std::string& prefix) {
  for (const auto& k : keys) {
    if (k.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

absl::StatusOr<at::Tensor> EncodeDir(const std::string& dir, const std::vector<int64_t>& layers) {
  auto enc = TextEncoder::Open(dir, at::kFloat, at::kCPU);
  if (!enc.ok()) return enc.status();
  at::Tensor ids = at::tensor({1, 17, 300, 301, 302, 18, 3, 120, 4}, at::kLong).view({1, 9});
  return (*enc)->Encode(ids, at::Tensor(), layers);
}

// Mistral-Small-3.1-24B-Instruct-2503's config.json as published (language-model part and the keys
// around it).
constexpr char kMistralSmall31Config[] = R"({
  "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3", "image_token_index": 10,
  "text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 32768,
    "max_position_embeddings": 131072, "model_type": "mistral", "num_attention_heads": 32,
    "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0,
    "sliding_window": null, "vocab_size": 131072},
  "vision_config": {"model_type": "pixtral", "hidden_size": 1024, "num_hidden_layers": 24}})";

TEST(TextEncoderConfigTest, ParsesMistral3TextConfig) {
  auto c = ParseTextEncoderConfig(kMistralSmall31Config, "mistral");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "mistral");
  EXPECT_TRUE(c->is_mistral3());
  EXPECT_EQ(c->hidden_size, 5120);
  EXPECT_EQ(c->head_dim, 128);  // not 5120 / 32 = 160
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->num_hidden_layers, 40);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e9);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_FALSE(c->qk_norm);
  // q,o: 5120×4096 each; k,v: 5120×1024 each; gate/up/down: 5120×32768 each; two 5120 norms.
  EXPECT_EQ(c->LayerParams(), 2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * int64_t{5120} * 32768 + 2 * 5120);
}

TEST(TextEncoderConfigTest, ParsesQwen3AndTransformers5Forms) {
  auto q = ParseTextEncoderConfig(R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
      "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
      "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
      "vocab_size": 151936, "attention_bias": false, "use_sliding_window": false, "sliding_window": null})",
                                  "qwen3");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->qk_norm);
  EXPECT_FALSE(q->is_mistral3());
  EXPECT_DOUBLE_EQ(q->rope_theta, 1e6);
  auto v5 = ParseTextEncoderConfig(R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10,
      "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}})",
                                   "v5");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_DOUBLE_EQ(v5->rope_theta, 5000.0);
  EXPECT_EQ(v5->head_dim, 16);            // hidden / heads when absent
  EXPECT_EQ(v5->num_key_value_heads, 4);  // = heads when absent
  auto no_window = ParseTextEncoderConfig(R"({"model_type": "mistral", "hidden_size": 8,
      "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4})",
                                          "m");
  ASSERT_TRUE(no_window.ok()) << no_window.status();
  EXPECT_EQ(no_window->sliding_window, 4096);  // MistralConfig's default when the key is absent
}

TEST(TextEncoderConfigTest, RejectsUnsupportedAndIncompleteConfigs) {
  auto yarn = ParseTextEncoderConfig(R"({"model_type": "qwen3", "hidden_size": 8, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
                                     "yarn.json");
  EXPECT_EQ(yarn.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(yarn.status().message().find("yarn"), std::string::npos);
  auto missing = ParseTextEncoderConfig(R"({"model_type": "mistral", "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4})",
                                        "cfg.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("hidden_size"), std::string::npos);
  EXPECT_NE(missing.status().message().find("cfg.json"), std::string::npos);
  auto gelu = ParseTextEncoderConfig(R"({"model_type": "llama", "hidden_size": 8, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4, "hidden_act": "gelu"})",
                                     "g");
  EXPECT_EQ(gelu.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ParseTextEncoderConfig("[1]", "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TextEncoderConfigTest, WrittenConfigParsesBack) {
  for (const TextEncoderConfig& c : {TinyMistral3TextConfig(), TinyQwen3TextConfig()}) {
    auto back = ParseTextEncoderConfig(TextEncoderConfigToJson(c), "roundtrip");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->architecture, c.architecture);
    EXPECT_EQ(back->model_type, c.model_type);
    EXPECT_EQ(back->head_dim, c.head_dim);
    EXPECT_EQ(back->num_hidden_layers, c.num_hidden_layers);
    EXPECT_EQ(back->num_key_value_heads, c.num_key_value_heads);
    EXPECT_EQ(back->qk_norm, c.qk_norm);
    EXPECT_EQ(back->sliding_window, c.sliding_window);
    EXPECT_DOUBLE_EQ(back->rope_theta, c.rope_theta);
  }
}

TEST(TextEncoderCheckpointTest, HeadDimFromConfigShapesTheProjections) {
  const TextEncoderConfig c = TinyMistral3TextConfig();  // 4 heads × head_dim 16 on hidden 32
  const std::string dir = FreshCheckpointDir("head_dim");
  ASSERT_TRUE(WriteRandomTextEncoder(c, dir, 1).ok());
  auto file = SafetensorsFile::Open(JoinPath(dir, "model.safetensors"));
  ASSERT_TRUE(file.ok());
  const std::string p = "model.language_model.layers.0.self_attn.";
  EXPECT_EQ((*file)->Entry(p + "q_proj.weight")->shape, (std::vector<int64_t>{4 * 16, 32}));
  EXPECT_EQ((*file)->Entry(p + "k_proj.weight")->shape, (std::vector<int64_t>{2 * 16, 32}));
  EXPECT_EQ((*file)->Entry(p + "o_proj.weight")->shape, (std::vector<int64_t>{32, 4 * 16}));
  ASSERT_TRUE(EncodeDir(dir, {1}).ok());

  // Without head_dim in the config, transformers would use 32/4 = 8: the weights no longer fit.
  auto text = ReadFile(JoinPath(dir, "config.json"));
  ASSERT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  j["text_config"].erase("head_dim");
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), j.dump()).ok());
  auto bad = TextEncoder::Open(dir, at::kFloat, at::kCPU);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("q_proj.weight"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("[64, 32]"), std::string::npos) << bad.status();
}

TEST(TextEncoderCheckpointTest, Mistral3LayoutsAndShardsGiveIdenticalOutputs) {
  const TextEncoderConfig c = TinyMistral3TextConfig();
  const std::string newer = FreshCheckpointDir("newer"), legacy = FreshCheckpointDir("legacy"),
                    sharded = FreshCheckpointDir("sharded");
  ASSERT_TRUE(WriteRandomTextEncoder(c, newer, 21).ok());
  ASSERT_TRUE(WriteRandomTextEncoder(c, legacy, 21, /*legacy_layout=*/true).ok());
  ASSERT_TRUE(WriteRandomTextEncoder(c, sharded, 21, false, /*max_shard_bytes=*/64 << 10).ok());

  const auto newer_keys = KeysOf(JoinPath(newer, "model.safetensors"));
  const auto legacy_keys = KeysOf(JoinPath(legacy, "model.safetensors"));
  EXPECT_TRUE(AnyKeyStartsWith(newer_keys, "model.language_model.layers.0."));
  EXPECT_TRUE(AnyKeyStartsWith(newer_keys, "model.vision_tower."));
  EXPECT_TRUE(AnyKeyStartsWith(newer_keys, "model.multi_modal_projector."));
  EXPECT_TRUE(AnyKeyStartsWith(newer_keys, "lm_head.weight"));
  EXPECT_TRUE(AnyKeyStartsWith(legacy_keys, "language_model.model.layers.0."));
  EXPECT_TRUE(AnyKeyStartsWith(legacy_keys, "vision_tower."));
  EXPECT_TRUE(AnyKeyStartsWith(legacy_keys, "language_model.lm_head.weight"));
  EXPECT_FALSE(PathExists(JoinPath(sharded, "model.safetensors")));
  auto index = nlohmann::json::parse(*ReadFile(JoinPath(sharded, "model.safetensors.index.json")));
  std::set<std::string> shard_files;
  for (auto& [key, file] : index["weight_map"].items()) shard_files.insert(file.get<std::string>());
  EXPECT_GT(shard_files.size(), 2u);

  auto ck_new = TextEncoderCheckpoint::Open(newer);
  auto ck_old = TextEncoderCheckpoint::Open(legacy);
  ASSERT_TRUE(ck_new.ok() && ck_old.ok());
  EXPECT_EQ((*ck_new)->prefix(), "model.language_model.");
  EXPECT_EQ((*ck_old)->prefix(), "language_model.model.");

  const std::vector<int64_t> layers = {10, 20, 30};
  auto a = EncodeDir(newer, layers), b = EncodeDir(legacy, layers), s = EncodeDir(sharded, layers);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(at::equal(*a, *b));
  EXPECT_TRUE(at::equal(*a, *s));
}

TEST(TextEncoderCheckpointTest, Qwen3AndPlainMistralUseModelPrefix) {
  TextEncoderConfig plain = TinyMistral3TextConfig();
  plain.architecture = "MistralForCausalLM";
  for (const TextEncoderConfig& c : {TinyQwen3TextConfig(), plain}) {
    const std::string dir = FreshCheckpointDir("prefix_" + c.architecture);
    ASSERT_TRUE(WriteRandomTextEncoder(c, dir, 4).ok());
    auto ck = TextEncoderCheckpoint::Open(dir);
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_EQ((*ck)->prefix(), "model.");
    EXPECT_TRUE((*ck)->Contains("layers.0.mlp.down_proj.weight"));
    EXPECT_EQ((*ck)->Contains("layers.0.self_attn.q_norm.weight"), c.qk_norm);
    EXPECT_TRUE(EncodeDir(dir, {3}).ok());
  }
}

// Encode with layers {1, 2} runs decoder layers 0 and 1 only: a checkpoint without layers 2.. (and
// without the final norm) still works, and so does one whose later shards are garbage.
TEST(TextEncoderCheckpointTest, NeverReadsLayersPastTheDeepestRequested) {
  const TextEncoderConfig c = TinyMistral3TextConfig();
  const std::string full = FreshCheckpointDir("full"), cut = FreshCheckpointDir("cut"),
                    broken = FreshCheckpointDir("broken");
  ASSERT_TRUE(WriteRandomTextEncoder(c, full, 33).ok());
  auto want = EncodeDir(full, {1, 2});
  ASSERT_TRUE(want.ok()) << want.status();

  auto all = LoadAllSafetensors(JoinPath(full, "model.safetensors"));
  ASSERT_TRUE(all.ok());
  std::map<std::string, at::Tensor> kept;
  for (const auto& [key, t] : *all) {
    const bool early = key.rfind("model.language_model.layers.0.", 0) == 0 ||
                       key.rfind("model.language_model.layers.1.", 0) == 0 ||
                       key == "model.language_model.embed_tokens.weight";
    if (early || key.rfind("model.language_model.", 0) != 0) kept[key] = t;
  }
  ASSERT_TRUE(WriteSafetensors(JoinPath(cut, "model.safetensors"), kept).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(cut, "config.json"), *ReadFile(JoinPath(full, "config.json"))).ok());
  auto got = EncodeDir(cut, {1, 2});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(at::equal(*got, *want));
  auto deeper = EncodeDir(cut, {3});
  EXPECT_EQ(deeper.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(deeper.status().message().find("layers.2."), std::string::npos) << deeper.status();

  // Sharded (~32 KB shards, in model order): overwrite every shard that holds none of the tensors needed.
  ASSERT_TRUE(WriteRandomTextEncoder(c, broken, 33, false, /*max_shard_bytes=*/32 << 10).ok());
  auto index = nlohmann::json::parse(*ReadFile(JoinPath(broken, "model.safetensors.index.json")));
  std::map<std::string, bool> needed;
  for (auto& [key, file] : index["weight_map"].items()) {
    const bool need = key.rfind("model.language_model.layers.0.", 0) == 0 ||
                      key.rfind("model.language_model.layers.1.", 0) == 0 ||
                      key == "model.language_model.embed_tokens.weight";
    needed[file.get<std::string>()] |= need;
  }
  int corrupted = 0;
  for (const auto& [file, need] : needed) {
    if (need) continue;
    ASSERT_TRUE(WriteFileAtomic(JoinPath(broken, file), "not a safetensors file").ok());
    ++corrupted;
  }
  EXPECT_GT(corrupted, 10);
  auto enc = TextEncoder::Open(broken, at::kFloat, at::kCPU);
  ASSERT_TRUE(enc.ok()) << enc.status();
  at::Tensor ids = at::tensor({1, 17, 300, 301, 302, 18, 3, 120, 4}, at::kLong).view({1, 9});
  auto sharded = (*enc)->Encode(ids, at::Tensor(), {1, 2});
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_TRUE(at::equal(*sharded, *want));
  // One layer's weights at a time (fp32), never two.
  EXPECT_EQ((*enc)->last_peak_weight_bytes(), c.LayerParams() * 4);
  EXPECT_FALSE((*enc)->Encode(ids, at::Tensor(), {30}).ok());
}

}  // namespace
}  // namespace baton
