// CLIP image encoder plumbing: the random writer's layouts (vision_model.* and bare, sharded, bf16) as the loader reads
// them, shapes, batch independence, the last layer never mattering, and every loader error named in one status.
// Numerics against transformers' CLIPVisionModel: tests/upstream/test_clip_vision.py.
#include "core/encode/clip_vision.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "core/tensor/safetensors.h"
#include "core/util/files.h"

namespace baton {
namespace {

std::string FreshDir(const std::string& name) {
  std::string dir = JoinPath(::testing::TempDir(), absl::StrCat("clip_vision_test_", name, "_", getpid()));
  EXPECT_TRUE(RemoveAll(dir).ok());
  return dir;
}

RandomClipVisionOptions Options(bool vision_model_prefix, bool bf16, int64_t max_shard_bytes) {
  RandomClipVisionOptions o;
  o.vision_model_prefix = vision_model_prefix;
  o.bf16 = bf16;
  o.max_shard_bytes = max_shard_bytes;
  return o;
}

at::Tensor Pixels(int64_t batch, const ClipVisionConfig& c, int64_t seed) {
  at::manual_seed(seed);
  return at::randn({batch, c.num_channels, c.image_size, c.image_size});
}

at::Tensor Encode(const std::string& dir, const at::Tensor& pixels, at::ScalarType dtype = at::kFloat) {
  auto enc = ClipVisionEncoder::Load(dir, dtype, at::kCPU);
  EXPECT_TRUE(enc.ok()) << enc.status();
  if (!enc.ok()) return at::Tensor();
  auto out = (*enc)->PenultimateHiddenStates(pixels);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : at::Tensor();
}

TEST(ClipVisionEncoderTest, ShapesLayoutsAndBatches) {
  const ClipVisionConfig c = TinyClipVisionConfig();
  const std::string prefixed = FreshDir("prefixed"), bare = FreshDir("bare"), sharded = FreshDir("sharded");
  ASSERT_TRUE(WriteRandomClipVision(c, prefixed, 7).ok());
  ASSERT_TRUE(WriteRandomClipVision(c, bare, 7, Options(false, false, 0)).ok());
  ASSERT_TRUE(WriteRandomClipVision(c, sharded, 7, Options(true, false, 8000)).ok());
  ASSERT_TRUE(PathExists(JoinPath(sharded, "model.safetensors.index.json")));

  auto enc = ClipVisionEncoder::Load(prefixed, at::kFloat, at::kCPU);
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_EQ((*enc)->tokens(), 17);
  const at::Tensor pixels = Pixels(3, c, 1);
  auto out = (*enc)->PenultimateHiddenStates(pixels);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->sizes(), (std::vector<int64_t>{3, 17, 32}));
  EXPECT_EQ(out->scalar_type(), at::kFloat);
  EXPECT_TRUE(at::isfinite(*out).all().item<bool>());
  EXPECT_GT(out->std().item<double>(), 0.1);  // not collapsed by the random weights

  // Same seed per tensor name: the three layouts hold the same values.
  EXPECT_TRUE(at::equal(Encode(bare, pixels), *out));
  EXPECT_TRUE(at::equal(Encode(sharded, pixels), *out));
  // Each image is encoded on its own: row 1 alone equals row 1 of the batch.
  auto one = (*enc)->PenultimateHiddenStates(pixels.slice(0, 1, 2));
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(at::allclose(*one, out->slice(0, 1, 2), 1e-5, 1e-6));
  // Pixels in another dtype are cast first.
  auto dbl = (*enc)->PenultimateHiddenStates(pixels.to(at::kDouble));
  ASSERT_TRUE(dbl.ok());
  EXPECT_TRUE(at::equal(*dbl, *out));
}

TEST(ClipVisionEncoderTest, Bf16CheckpointAndComputeDtype) {
  const ClipVisionConfig c = TinyClipVisionConfig();
  const std::string f32 = FreshDir("f32"), bf16 = FreshDir("bf16");
  ASSERT_TRUE(WriteRandomClipVision(c, f32, 3).ok());
  ASSERT_TRUE(WriteRandomClipVision(c, bf16, 3, Options(true, true, 0)).ok());
  const at::Tensor pixels = Pixels(2, c, 2);
  const at::Tensor full = Encode(f32, pixels);
  const at::Tensor stored = Encode(bf16, pixels);                  // bf16 weights computed in fp32
  const at::Tensor computed = Encode(f32, pixels, at::kBFloat16);  // fp32 weights computed in bf16
  ASSERT_TRUE(full.defined() && stored.defined() && computed.defined());
  const double scale = full.abs().max().item<double>();
  EXPECT_LT((stored - full).abs().max().item<double>() / scale, 0.05);
  EXPECT_LT((computed - full).abs().max().item<double>() / scale, 0.1);
  EXPECT_FALSE(at::equal(stored, full));
}

TEST(ClipVisionEncoderTest, TheLastLayerIsNotRun) {
  ClipVisionConfig c = TinyClipVisionConfig();
  const std::string dir = FreshDir("last_layer");
  ASSERT_TRUE(WriteRandomClipVision(c, dir, 5).ok());
  const at::Tensor pixels = Pixels(1, c, 3);
  const at::Tensor before = Encode(dir, pixels);
  // Without the last layer's tensors (and post_layernorm) the checkpoint still loads, to the same output.
  const std::string path = JoinPath(dir, "model.safetensors");
  auto all = LoadAllSafetensors(path);
  ASSERT_TRUE(all.ok());
  std::map<std::string, at::Tensor> kept;
  const std::string last = absl::StrCat("vision_model.encoder.layers.", c.num_hidden_layers - 1, ".");
  for (auto& [key, t] : *all) {
    if (key.rfind(last, 0) != 0 && key.find("post_layernorm") == std::string::npos) kept[key] = t;
  }
  ASSERT_LT(kept.size(), all->size());
  ASSERT_TRUE(WriteSafetensors(path, kept).ok());
  EXPECT_TRUE(at::equal(Encode(dir, pixels), before));
  // A one-layer model's penultimate hidden states are pre_layrnorm's output: nothing is run.
  c.num_hidden_layers = 1;
  const std::string one = FreshDir("one_layer");
  ASSERT_TRUE(WriteRandomClipVision(c, one, 5).ok());
  const at::Tensor h = Encode(one, pixels);
  ASSERT_EQ(h.sizes(), (std::vector<int64_t>{1, 17, 32}));
  EXPECT_LT(h.mean(-1).abs().max().item<double>(), 0.5);  // layer-normed rows (weights ~1, biases ~0.1)
}

TEST(ClipVisionEncoderTest, LoaderNamesEveryProblemAtOnce) {
  const ClipVisionConfig c = TinyClipVisionConfig();
  const std::string dir = FreshDir("errors");
  ASSERT_TRUE(WriteRandomClipVision(c, dir, 1).ok());
  const std::string path = JoinPath(dir, "model.safetensors");
  auto all = LoadAllSafetensors(path);
  ASSERT_TRUE(all.ok());
  std::map<std::string, at::Tensor> broken = *all;
  broken.erase("vision_model.encoder.layers.0.mlp.fc1.bias");
  broken.erase("vision_model.pre_layrnorm.weight");
  broken["vision_model.embeddings.position_embedding.weight"] = at::zeros({16, 32});
  broken["vision_model.encoder.layers.7.mlp.fc1.bias"] = at::zeros({48});  // a layer the config does not have
  broken["vision_model.post_layernorm.weight"] = at::zeros({5});           // not needed: never checked
  ASSERT_TRUE(WriteSafetensors(path, broken).ok());
  auto enc = ClipVisionEncoder::Load(dir, at::kFloat, at::kCPU);
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(enc.status().message());
  for (const char* says :
       {"missing keys", "layers.0.mlp.fc1.bias", "pre_layrnorm.weight", "mis-shaped keys",
        "position_embedding.weight (expected [17, 32], found [16, 32])", "unexpected keys", "layers.7.mlp.fc1.bias"}) {
    EXPECT_NE(msg.find(says), std::string::npos) << says << " in: " << msg;
  }
  EXPECT_EQ(msg.find("post_layernorm"), std::string::npos) << msg;

  // A config that disagrees with the weights: every linear of the first layers is mis-shaped.
  const std::string wide = FreshDir("wide");
  ASSERT_TRUE(WriteRandomClipVision(c, wide, 1).ok());
  ClipVisionConfig other = c;
  other.intermediate_size = 64;
  ASSERT_TRUE(WriteFileAtomic(JoinPath(wide, "config.json"), ClipVisionConfigToJson(other)).ok());
  auto mismatch = ClipVisionEncoder::Load(wide, at::kFloat, at::kCPU);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("layers.1.mlp.fc2.weight (expected [32, 64], found [32, 48])"),
            std::string::npos)
      << mismatch.status();

  // Not a CLIP vision checkpoint at all.
  const std::string other_model = FreshDir("other");
  ASSERT_TRUE(MakeDirs(other_model).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(other_model, "config.json"), ClipVisionConfigToJson(c)).ok());
  ASSERT_TRUE(WriteSafetensors(JoinPath(other_model, "model.safetensors"), {{"shared.weight", at::zeros({2})}}).ok());
  auto not_clip = ClipVisionEncoder::Load(other_model, at::kFloat, at::kCPU);
  EXPECT_EQ(not_clip.status().code(), absl::StatusCode::kNotFound) << not_clip.status();
  EXPECT_EQ(ClipVisionEncoder::Load(wide, at::kLong, at::kCPU).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClipVisionEncoderTest, RejectsPixelsOfAnotherShape) {
  const ClipVisionConfig c = TinyClipVisionConfig();
  const std::string dir = FreshDir("shapes");
  ASSERT_TRUE(WriteRandomClipVision(c, dir, 1).ok());
  auto enc = ClipVisionEncoder::Load(dir, at::kFloat, at::kCPU);
  ASSERT_TRUE(enc.ok()) << enc.status();
  for (const at::Tensor& bad : {at::zeros({1, 3, 20, 20}), at::zeros({1, 1, 16, 16}), at::zeros({3, 16, 16}),
                                at::zeros({1, 3, 16, 16}, at::kLong), at::Tensor()}) {
    auto out = (*enc)->PenultimateHiddenStates(bad);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  }
}

TEST(ClipFoldersTest, FindsThePipelinesParts) {
  const std::string pipeline = FreshDir("pipeline");
  ASSERT_TRUE(WriteRandomClipPipelineFolders(TinyClipVisionConfig(), pipeline, 2).ok());
  auto from_pipeline = FindClipFolders(pipeline);
  ASSERT_TRUE(from_pipeline.ok()) << from_pipeline.status();
  EXPECT_EQ(from_pipeline->image_encoder, JoinPath(pipeline, "image_encoder"));
  EXPECT_EQ(from_pipeline->image_processor, JoinPath(pipeline, "image_processor/preprocessor_config.json"));
  auto from_encoder = FindClipFolders(JoinPath(pipeline, "image_encoder"));
  ASSERT_TRUE(from_encoder.ok()) << from_encoder.status();
  EXPECT_EQ(from_encoder->image_encoder, JoinPath(pipeline, "image_encoder"));
  EXPECT_TRUE(PathExists(from_encoder->image_processor)) << from_encoder->image_processor;
  ASSERT_TRUE(RemoveAll(JoinPath(pipeline, "image_processor")).ok());
  auto without = FindClipFolders(pipeline);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->image_processor, "");
  EXPECT_EQ(FindClipFolders(FreshDir("empty")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace baton
