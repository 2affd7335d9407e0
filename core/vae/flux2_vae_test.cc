#include "core/vae/flux2_vae.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "core/tensor/safetensors.h"
#include "core/util/files.h"

namespace baton {
namespace {

std::string TempDir(const std::string& name) {
  std::string tmpl = JoinPath(::testing::TempDir(), "flux2_vae_" + name + "_XXXXXX");
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* dir = mkdtemp(buf.data());
  EXPECT_NE(dir, nullptr) << tmpl;
  return dir ? dir : "";
}

at::Tensor Randn(at::IntArrayRef shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::kFloat);
}

// Overwrites every parameter of `m` with seeded noise: GroupNorm weights 1 + N(0, 0.2²), matrices scaled by
// 1/√fan_in, other vectors N(0, 0.3²).
void Randomize(torch::nn::Module& m, uint64_t seed) {
  at::NoGradGuard no_grad;
  uint64_t i = 0;
  for (auto& p : m.named_parameters()) {
    at::Tensor r = Randn(p.value().sizes(), seed * 1000 + i++);
    if (p.value().dim() >= 2) {
      r /= std::sqrt(static_cast<double>(p.value().numel() / p.value().size(0)));
    } else if (absl::StrContains(p.key(), "norm") && absl::EndsWith(p.key(), ".weight")) {
      r = 1.0 + 0.2 * r;
    } else {
      r *= 0.3;
    }
    p.value().copy_(r);
  }
}

// GroupNorm spelled out: statistics over each group of channels and all pixels, biased variance.
at::Tensor GroupNormByHand(const at::Tensor& x, int64_t groups, const at::Tensor& w, const at::Tensor& b, double eps) {
  at::Tensor g = x.reshape({x.size(0), groups, -1});
  at::Tensor mean = g.mean(-1, true);
  at::Tensor var = (g - mean).pow(2).mean(-1, true);
  at::Tensor n = ((g - mean) / at::sqrt(var + eps)).reshape(x.sizes());
  return n * w.view({1, -1, 1, 1}) + b.view({1, -1, 1, 1});
}

at::Tensor SiluByHand(const at::Tensor& x) { return x / (1 + at::exp(-x)); }

bool Close(const at::Tensor& a, const at::Tensor& b, double tol) {
  if (a.sizes() != b.sizes()) return false;
  return (a - b).abs().max().item<double>() <= tol * (1 + b.abs().max().item<double>());
}

// The FLUX.2 vae/config.json as published with FLUX.2-dev.
constexpr char kFlux2VaeConfigJson[] = R"({
  "_class_name": "AutoencoderKLFlux2", "_diffusers_version": "0.36.0.dev0", "act_fn": "silu",
  "batch_norm_eps": 0.0001, "batch_norm_momentum": 0.1, "block_out_channels": [128, 256, 512, 512],
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
  "force_upcast": true, "in_channels": 3, "latent_channels": 32, "layers_per_block": 2,
  "mid_block_add_attention": true, "norm_num_groups": 32, "out_channels": 3, "patch_size": [2, 2],
  "sample_size": 1024,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"],
  "use_post_quant_conv": true, "use_quant_conv": true})";

TEST(Flux2VaeConfigTest, ParsesPublishedConfigAndRoundTrips) {
  auto c = ParseFlux2VaeConfig(kFlux2VaeConfigJson);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->block_out_channels, (std::vector<int64_t>{128, 256, 512, 512}));
  EXPECT_EQ(c->latent_channels, 32);
  EXPECT_EQ(c->downsample_factor(), 8);
  EXPECT_EQ(c->patched_channels(), 128);
  EXPECT_DOUBLE_EQ(c->batch_norm_eps, 1e-4);
  Flux2VaeConfig tiny = TinyFlux2VaeConfig();
  auto back = ParseFlux2VaeConfig(Flux2VaeConfigToJson(tiny));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->block_out_channels, tiny.block_out_channels);
  EXPECT_EQ(back->layers_per_block, tiny.layers_per_block);
  EXPECT_EQ(back->norm_num_groups, tiny.norm_num_groups);
  EXPECT_EQ(back->sample_size, tiny.sample_size);

  auto bad_type = ParseFlux2VaeConfig(R"({"layers_per_block": "two"})");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_TRUE(absl::StrContains(bad_type.status().message(), "layers_per_block"));
  auto bad_block = ParseFlux2VaeConfig(
      R"({"down_block_types": ["AttnDownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D",
          "DownEncoderBlock2D"]})");
  ASSERT_FALSE(bad_block.ok());
  EXPECT_TRUE(absl::StrContains(bad_block.status().message(), "AttnDownEncoderBlock2D"));
  EXPECT_FALSE(ParseFlux2VaeConfig(R"({"patch_size": [1, 1]})").ok());
  EXPECT_FALSE(ParseFlux2VaeConfig(R"({"norm_num_groups": 48})").ok());  // 48 does not divide 128
}

TEST(Flux2VaeConfigTest, TensorListMatchesTheReleasedCheckpoint) {
  // The released FLUX.2 VAE file holds 251 tensors (250 float + bn.num_batches_tracked) and its model has
  // 84,046,115 parameters (the bn buffers are not parameters).
  auto shapes = Flux2VaeTensorShapes(Flux2VaeConfig());
  EXPECT_EQ(shapes.size(), 251u);
  int64_t total = 0;
  for (const auto& [name, shape] : shapes) {
    if (absl::StartsWith(name, "bn.")) continue;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    total += n;
  }
  EXPECT_EQ(total, 84046115);
  EXPECT_EQ(shapes.at("encoder.down_blocks.1.resnets.0.conv_shortcut.weight"), (std::vector<int64_t>{256, 128, 1, 1}));
  EXPECT_EQ(shapes.at("decoder.up_blocks.3.resnets.0.conv_shortcut.weight"), (std::vector<int64_t>{128, 256, 1, 1}));
  EXPECT_EQ(shapes.at("decoder.up_blocks.0.resnets.2.conv2.weight"), (std::vector<int64_t>{512, 512, 3, 3}));
  EXPECT_EQ(shapes.at("encoder.mid_block.attentions.0.to_out.0.weight"), (std::vector<int64_t>{512, 512}));
  EXPECT_EQ(shapes.at("bn.running_var"), (std::vector<int64_t>{128}));
  EXPECT_FALSE(shapes.count("encoder.down_blocks.3.downsamplers.0.conv.weight"));
  EXPECT_FALSE(shapes.count("decoder.up_blocks.3.upsamplers.0.conv.weight"));
}

TEST(Flux2VaeBlocksTest, ModuleNamesEqualTheCheckpointKeys) {
  // Two independent descriptions of the encoder (module tree vs key list) must agree name for name and
  // shape for shape, for the tiny config and for the real FLUX.2 one.
  for (const Flux2VaeConfig& c : {TinyFlux2VaeConfig(), Flux2VaeConfig()}) {
    AutoencoderKLFlux2Encoder m(c);
    std::map<std::string, std::vector<int64_t>> from_module, from_list;
    for (const auto& p : m->named_parameters()) from_module[p.key()] = p.value().sizes().vec();
    for (const auto& b : m->named_buffers()) from_module[b.key()] = b.value().sizes().vec();
    for (const auto& [name, shape] : Flux2VaeTensorShapes(c)) {
      if (IsFlux2VaeEncoderKey(name)) from_list[name] = shape;
    }
    EXPECT_EQ(from_module, from_list);
  }
}

TEST(Flux2VaeBlocksTest, ResnetBlockMatchesHandComputation) {
  for (bool shortcut : {false, true}) {
    const int64_t in = 8, out = shortcut ? 12 : 8, groups = 4;
    ResnetBlock2D block(in, out, groups);
    Randomize(*block, shortcut ? 11 : 12);
    EXPECT_EQ(static_cast<bool>(block->conv_shortcut), shortcut);
    at::Tensor x = Randn({2, in, 5, 6}, 3);
    at::Tensor h = SiluByHand(GroupNormByHand(x, groups, block->norm1->weight, block->norm1->bias, 1e-6));
    h = at::conv2d(h, block->conv1->weight, block->conv1->bias, 1, 1);
    h = SiluByHand(GroupNormByHand(h, groups, block->norm2->weight, block->norm2->bias, 1e-6));
    h = at::conv2d(h, block->conv2->weight, block->conv2->bias, 1, 1);
    at::Tensor skip = shortcut ? at::conv2d(x, block->conv_shortcut->weight, block->conv_shortcut->bias) : x;
    at::NoGradGuard no_grad;
    at::Tensor got = block->forward(x);
    EXPECT_EQ(got.sizes(), (std::vector<int64_t>{2, out, 5, 6}));
    EXPECT_TRUE(Close(got, skip + h, 1e-5)) << "shortcut=" << shortcut;
  }
}

TEST(Flux2VaeBlocksTest, MidBlockAttentionMatchesPerPixelSoftmax) {
  const int64_t b = 2, c = 8, hh = 3, ww = 4, n = hh * ww, groups = 2;
  VaeAttention attn(c, groups);
  Randomize(*attn, 21);
  at::Tensor x = Randn({b, c, hh, ww}, 22);
  at::NoGradGuard no_grad;
  at::Tensor normed = GroupNormByHand(x, groups, attn->group_norm->weight, attn->group_norm->bias, 1e-6);
  auto proj = [](const torch::nn::Linear& l, const at::Tensor& v) { return at::mv(l->weight, v) + l->bias; };
  auto out_linear = attn->to_out->ptr<torch::nn::LinearImpl>(0);
  at::Tensor expected = at::empty_like(x);
  for (int64_t bi = 0; bi < b; ++bi) {
    std::vector<at::Tensor> keys, values;
    for (int64_t j = 0; j < n; ++j) {
      at::Tensor t = normed[bi].select(1, j / ww).select(1, j % ww);  // [C] at pixel j
      keys.push_back(proj(attn->to_k, t));
      values.push_back(proj(attn->to_v, t));
    }
    for (int64_t p = 0; p < n; ++p) {
      at::Tensor q = proj(attn->to_q, normed[bi].select(1, p / ww).select(1, p % ww));
      std::vector<double> s(n);
      double max_s = -1e30, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = at::dot(q, keys[j]).item<double>() / std::sqrt(static_cast<double>(c));
        max_s = std::max(max_s, s[j]);
      }
      for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - max_s);
      at::Tensor o = at::zeros({c});
      for (int64_t j = 0; j < n; ++j) o += values[j] * (std::exp(s[j] - max_s) / sum);
      at::Tensor y = at::mv(out_linear->weight, o) + out_linear->bias + x[bi].select(1, p / ww).select(1, p % ww);
      expected[bi].select(1, p / ww).select(1, p % ww).copy_(y);
    }
  }
  EXPECT_TRUE(Close(attn->forward(x), expected, 1e-5));
  attn->query_chunk = 5;  // chunks of 5, 5, 2 queries
  EXPECT_TRUE(Close(attn->forward(x), expected, 1e-5));
}

TEST(Flux2VaeBlocksTest, DownsamplePadsBottomAndRightOnly) {
  Downsample2D down(4);
  Randomize(*down, 31);
  at::Tensor x = Randn({1, 4, 6, 8}, 32);
  at::NoGradGuard no_grad;
  at::Tensor padded = at::zeros({1, 4, 7, 9});
  padded.narrow(2, 0, 6).narrow(3, 0, 8).copy_(x);
  at::Tensor expected = at::conv2d(padded, down->conv->weight, down->conv->bias, /*stride=*/2);
  at::Tensor got = down->forward(x);
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{1, 4, 3, 4}));
  EXPECT_TRUE(Close(got, expected, 1e-6));
  // Symmetric padding gives the same shape but different values: the asymmetry matters.
  at::Tensor symmetric = at::conv2d(x, down->conv->weight, down->conv->bias, 2, 1);
  EXPECT_FALSE(Close(got, symmetric, 1e-3));
}

class Flux2VaeTinyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir("tiny");
    ASSERT_TRUE(WriteRandomFlux2Vae(TinyFlux2VaeConfig(), dir_, /*seed=*/5).ok());
    auto enc = Flux2VaeEncoder::Load(dir_, at::kFloat, at::kCPU);
    ASSERT_TRUE(enc.ok()) << enc.status();
    enc_ = std::move(*enc);
    pixels_ = at::rand({1, 3, 32, 32}, at::detail::createCPUGenerator(9)) * 2 - 1;
  }
  void TearDown() override { RemoveAll(dir_).IgnoreError(); }

  // Rewrites the weights file after `edit` changes the tensor map.
  void EditWeights(const std::function<void(std::map<std::string, at::Tensor>&)>& edit) {
    const std::string path = JoinPath(dir_, "diffusion_pytorch_model.safetensors");
    auto tensors = LoadAllSafetensors(path);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    edit(*tensors);
    ASSERT_TRUE(WriteSafetensors(path, *tensors).ok());
  }

  std::string dir_;
  std::unique_ptr<Flux2VaeEncoder> enc_;
  at::Tensor pixels_;  // [1, 3, 32, 32] in [-1, 1]
};

TEST_F(Flux2VaeTinyTest, EncodeMeanIsFiniteAndDeterministic) {
  auto mean = enc_->EncodeMean(pixels_);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(mean->sizes(), (std::vector<int64_t>{1, 32, 4, 4}));
  EXPECT_EQ(mean->scalar_type(), at::kFloat);
  EXPECT_TRUE(at::isfinite(*mean).all().item<bool>());
  EXPECT_GT(mean->std().item<double>(), 1e-2);  // not collapsed to a constant
  auto again = enc_->EncodeMean(pixels_);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(at::equal(*mean, *again));
  auto other = Flux2VaeEncoder::Load(dir_, at::kFloat, at::kCPU);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(at::equal(*mean, *(*other)->EncodeMean(pixels_)));
  // A batch encodes each image independently.
  at::Tensor batch = at::cat({pixels_, -pixels_}, 0);
  auto both = enc_->EncodeMean(batch);
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(Close((*both)[0], (*mean)[0], 1e-5));
}

// A functional re-implementation of the encoder driven only by the key names in the written file.
at::Tensor ReferenceMoments(const std::map<std::string, at::Tensor>& sd, const Flux2VaeConfig& c, const at::Tensor& x) {
  auto P = [&](const std::string& k) { return sd.at(k); };
  auto gn = [&](const at::Tensor& h, const std::string& p) {
    return GroupNormByHand(h, c.norm_num_groups, P(p + ".weight"), P(p + ".bias"), 1e-6);
  };
  auto conv = [&](const at::Tensor& h, const std::string& p, int64_t stride, int64_t pad) {
    return at::conv2d(h, P(p + ".weight"), P(p + ".bias"), stride, pad);
  };
  auto resnet = [&](const at::Tensor& h, const std::string& p) {
    at::Tensor r = conv(SiluByHand(gn(h, p + ".norm1")), p + ".conv1", 1, 1);
    r = conv(SiluByHand(gn(r, p + ".norm2")), p + ".conv2", 1, 1);
    return (sd.count(p + ".conv_shortcut.weight") ? conv(h, p + ".conv_shortcut", 1, 0) : h) + r;
  };
  auto attention = [&](const at::Tensor& h, const std::string& p) {
    const int64_t ch = h.size(1);
    at::Tensor t = gn(h, p + ".group_norm").flatten(2).transpose(1, 2);
    auto lin = [&](const at::Tensor& v, const std::string& name) {
      return at::linear(v, P(name + ".weight"), P(name + ".bias"));
    };
    at::Tensor w =
        at::softmax(at::matmul(lin(t, p + ".to_q"), lin(t, p + ".to_k").transpose(1, 2)) / std::sqrt(ch), -1);
    at::Tensor o = lin(at::matmul(w, lin(t, p + ".to_v")), p + ".to_out.0");
    return o.transpose(1, 2).reshape(h.sizes()) + h;
  };
  at::Tensor h = conv(x, "encoder.conv_in", 1, 1);
  const int64_t levels = static_cast<int64_t>(c.block_out_channels.size());
  for (int64_t i = 0; i < levels; ++i) {
    for (int64_t r = 0; r < c.layers_per_block; ++r) {
      h = resnet(h, "encoder.down_blocks." + std::to_string(i) + ".resnets." + std::to_string(r));
    }
    if (i + 1 < levels) {
      at::Tensor padded = at::zeros({h.size(0), h.size(1), h.size(2) + 1, h.size(3) + 1});
      padded.narrow(2, 0, h.size(2)).narrow(3, 0, h.size(3)).copy_(h);
      h = conv(padded, "encoder.down_blocks." + std::to_string(i) + ".downsamplers.0.conv", 2, 0);
    }
  }
  h = resnet(h, "encoder.mid_block.resnets.0");
  h = attention(h, "encoder.mid_block.attentions.0");
  h = resnet(h, "encoder.mid_block.resnets.1");
  h = conv(SiluByHand(gn(h, "encoder.conv_norm_out")), "encoder.conv_out", 1, 1);
  return conv(h, "quant_conv", 1, 0);
}

TEST_F(Flux2VaeTinyTest, EncodeMatchesFunctionalReference) {
  auto sd = LoadAllSafetensors(JoinPath(dir_, "diffusion_pytorch_model.safetensors"));
  ASSERT_TRUE(sd.ok()) << sd.status();
  at::NoGradGuard no_grad;
  at::Tensor expected = ReferenceMoments(*sd, enc_->config(), pixels_);
  auto moments = enc_->EncodeMoments(pixels_);
  ASSERT_TRUE(moments.ok()) << moments.status();
  EXPECT_TRUE(Close(*moments, expected, 1e-4));
  EXPECT_TRUE(at::equal(*enc_->EncodeMean(pixels_), moments->narrow(1, 0, 32)));

  // bf16 weights and activations stay near the fp32 result.
  auto bf16 = Flux2VaeEncoder::Load(dir_, at::kBFloat16, at::kCPU);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ((*bf16)->module()->encoder->conv_in->weight.scalar_type(), at::kBFloat16);
  EXPECT_EQ((*bf16)->module()->bn->running_var.scalar_type(), at::kFloat);
  auto low = (*bf16)->EncodeMean(pixels_);
  ASSERT_TRUE(low.ok()) << low.status();
  EXPECT_EQ(low->scalar_type(), at::kFloat);
  EXPECT_TRUE(Close(*low, expected.narrow(1, 0, 32), 0.1));
}

TEST_F(Flux2VaeTinyTest, EncodeSampleIsMeanPlusScaledSeededNoise) {
  auto moments = enc_->EncodeMoments(pixels_);
  auto mean = enc_->EncodeMean(pixels_);
  auto s1 = enc_->EncodeSample(pixels_, 7);
  auto s2 = enc_->EncodeSample(pixels_, 7);
  auto s3 = enc_->EncodeSample(pixels_, 8);
  ASSERT_TRUE(moments.ok() && mean.ok() && s1.ok() && s2.ok() && s3.ok());
  EXPECT_TRUE(at::equal(*s1, *s2));
  EXPECT_FALSE(Close(*s1, *mean, 1e-3));
  EXPECT_FALSE(Close(*s1, *s3, 1e-3));
  at::Tensor logvar = moments->narrow(1, 32, 32);
  at::Tensor noise = at::randn({1, 32, 4, 4}, at::detail::createCPUGenerator(7), at::kFloat);
  EXPECT_TRUE(Close(*s1, *mean + at::exp(0.5 * at::clamp(logvar, -30, 20)) * noise, 1e-6));
}

TEST_F(Flux2VaeTinyTest, PatchifyAndNormalizeOrder) {
  auto sd = LoadAllSafetensors(JoinPath(dir_, "diffusion_pytorch_model.safetensors"));
  ASSERT_TRUE(sd.ok());
  const at::Tensor mean = sd->at("bn.running_mean"), var = sd->at("bn.running_var");
  const int64_t b = 2, c = 32, h = 4, w = 6;
  at::Tensor lat = at::empty({b, c, h, w});
  auto la = lat.accessor<float, 4>();
  for (int64_t i0 = 0; i0 < b; ++i0)
    for (int64_t i1 = 0; i1 < c; ++i1)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) la[i0][i1][y][x] = 100000.0f * i0 + 1000.0f * i1 + 10.0f * y + x;
  at::Tensor got = enc_->PatchifyAndNormalize(lat);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{b, (h / 2) * (w / 2), 4 * c}));
  auto ga = got.accessor<float, 3>();
  auto ma = mean.accessor<float, 1>();
  auto va = var.accessor<float, 1>();
  double worst = 0;
  for (int64_t i0 = 0; i0 < b; ++i0)
    for (int64_t i = 0; i < h / 2; ++i)
      for (int64_t j = 0; j < w / 2; ++j)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t dy = 0; dy < 2; ++dy)
            for (int64_t dx = 0; dx < 2; ++dx) {
              const int64_t k = ch * 4 + dy * 2 + dx, token = i * (w / 2) + j;
              const double raw = la[i0][ch][2 * i + dy][2 * j + dx];
              const double want = (raw - ma[k]) / std::sqrt(va[k] + 1e-4);
              worst = std::max(worst, std::abs(ga[i0][token][k] - want) / (1 + std::abs(want)));
            }
  EXPECT_LT(worst, 1e-6);
  EXPECT_THROW(enc_->PatchifyAndNormalize(at::zeros({1, 32, 3, 4})), c10::Error);
  EXPECT_THROW(enc_->PatchifyAndNormalize(at::zeros({1, 16, 4, 4})), c10::Error);
}

TEST_F(Flux2VaeTinyTest, RejectsBadPixelShapes) {
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{1, 3, 24, 32}, {1, 3, 32, 40}, {1, 4, 32, 32}, {3, 32, 32}, {0, 3, 32, 32}}) {
    auto r = enc_->EncodeMean(at::zeros(shape));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  auto r = enc_->EncodeMean(at::zeros({1, 3, 24, 32}));
  EXPECT_TRUE(absl::StrContains(r.status().message(), "multiples of 16")) << r.status();
  EXPECT_TRUE(enc_->EncodeMean(at::zeros({1, 3, 16, 48})).ok());
}

TEST_F(Flux2VaeTinyTest, WritesCompleteStateDictButLoadsOnlyTheEncoder) {
  auto sd = LoadAllSafetensors(JoinPath(dir_, "diffusion_pytorch_model.safetensors"));
  ASSERT_TRUE(sd.ok());
  auto shapes = Flux2VaeTensorShapes(TinyFlux2VaeConfig());
  ASSERT_EQ(sd->size(), shapes.size());
  for (const auto& [name, shape] : shapes) {
    ASSERT_TRUE(sd->count(name)) << name;
    EXPECT_EQ(sd->at(name).sizes().vec(), shape) << name;
  }
  EXPECT_TRUE(sd->count("decoder.up_blocks.0.upsamplers.0.conv.weight"));
  EXPECT_TRUE(sd->count("post_quant_conv.weight"));
  EXPECT_EQ(sd->at("bn.num_batches_tracked").scalar_type(), at::kLong);
  EXPECT_GT(sd->at("bn.running_var").min().item<double>(), 0.0);
  auto cfg = LoadFlux2VaeConfig(JoinPath(dir_, "config.json"));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->block_out_channels, TinyFlux2VaeConfig().block_out_channels);

  // Every loaded tensor equals the file's; no decoder tensor is in the module.
  int64_t loaded = 0;
  for (const auto& p : enc_->module()->named_parameters()) {
    EXPECT_FALSE(absl::StartsWith(p.key(), "decoder.") || absl::StartsWith(p.key(), "post_quant_conv."));
    EXPECT_TRUE(at::equal(p.value(), sd->at(p.key()))) << p.key();
    ++loaded;
  }
  EXPECT_TRUE(at::equal(enc_->module()->bn->running_mean, sd->at("bn.running_mean")));
  int64_t encoder_keys = 0;
  for (const auto& [name, t] : *sd) encoder_keys += (IsFlux2VaeEncoderKey(name) && !absl::StartsWith(name, "bn."));
  EXPECT_EQ(loaded, encoder_keys);

  // Decoder tensors are never read: a wrong-shaped or missing one does not matter.
  EditWeights([](auto& t) {
    t["decoder.conv_in.weight"] = at::zeros({1});
    t.erase("post_quant_conv.weight");
    t.erase("bn.num_batches_tracked");
  });
  EXPECT_TRUE(Flux2VaeEncoder::Load(dir_, at::kFloat, at::kCPU).ok());
}

TEST_F(Flux2VaeTinyTest, ReportsMissingMisshapedAndUnexpectedKeysTogether) {
  EditWeights([](auto& t) {
    t.erase("encoder.mid_block.attentions.0.to_q.weight");
    t["encoder.conv_in.weight"] = at::zeros({16, 3, 5, 5});
    t["encoder.down_blocks.0.resnets.1.norm1.weight"] = at::zeros({16});
  });
  auto r = Flux2VaeEncoder::Load(dir_, at::kFloat, at::kCPU);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(r.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "missing keys: encoder.mid_block.attentions.0.to_q.weight")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "encoder.conv_in.weight (expected [16, 3, 3, 3], found [16, 3, 5, 5])")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "unexpected keys: encoder.down_blocks.0.resnets.1.norm1.weight")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, dir_)) << msg;
}

TEST_F(Flux2VaeTinyTest, ConfigThatDisagreesWithTheWeightsIsRejected) {
  Flux2VaeConfig c = TinyFlux2VaeConfig();
  c.layers_per_block = 2;
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, "config.json"), Flux2VaeConfigToJson(c)).ok());
  auto r = Flux2VaeEncoder::Load(dir_, at::kFloat, at::kCPU);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "encoder.down_blocks.0.resnets.1.conv1.weight")) << r.status();
}

TEST_F(Flux2VaeTinyTest, LoadsShardedFolderAndPipelineFolder) {
  auto sd = LoadAllSafetensors(JoinPath(dir_, "diffusion_pytorch_model.safetensors"));
  ASSERT_TRUE(sd.ok());
  const std::string pipeline = TempDir("pipeline");
  const std::string vae = JoinPath(pipeline, "vae");
  ASSERT_TRUE(MakeDirs(vae).ok());
  std::map<std::string, at::Tensor> shard[2];
  nlohmann::json index;
  int i = 0;
  for (const auto& [name, t] : *sd) {
    const int s = i++ % 2;
    shard[s][name] = t;
    index["weight_map"][name] = "diffusion_pytorch_model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(
        WriteSafetensors(
            JoinPath(vae, "diffusion_pytorch_model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"), shard[s])
            .ok());
  }
  ASSERT_TRUE(WriteFileAtomic(JoinPath(vae, "diffusion_pytorch_model.safetensors.index.json"), index.dump()).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(vae, "config.json"), Flux2VaeConfigToJson(TinyFlux2VaeConfig())).ok());
  auto sharded = Flux2VaeEncoder::Load(pipeline, at::kFloat, at::kCPU);  // finds vae/ itself
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_TRUE(at::equal(*(*sharded)->EncodeMean(pixels_), *enc_->EncodeMean(pixels_)));
  RemoveAll(pipeline).IgnoreError();

  const std::string empty = TempDir("empty");
  auto none = Flux2VaeEncoder::Load(empty, at::kFloat, at::kCPU);
  EXPECT_FALSE(none.ok());
  RemoveAll(empty).IgnoreError();
}

}  // namespace
}  // namespace baton
