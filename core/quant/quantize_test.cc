// 8-bit frozen weights held against the full-precision model (ggml's "same computation two ways"): the
// quantizer's own bounds, per-block output error, the pre-quantized checkpoint against on-the-fly
// quantization (bitwise), ComfyUI scaled-fp8 files, and LoRA outputs free of 8-bit tensors.
#include <absl/strings/match.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/keys/flux2_keys.h"
#include "core/lora/lora.h"
#include "core/model/quantize_checkpoint.h"
#include "core/model/quantize_module.h"
#include "core/pipeline/partition.h"
#include "core/quant/quantize_tensor.h"
#include "core/quant/quantized_matmul.h"
#include "core/quant/stored_quant.h"
#include "core/tensor/safetensors.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/common.h"
#include "core/util/files.h"

namespace baton {
namespace {

using test_util::MakeTempDir;
using test_util::MakeTinyInputs;
using test_util::TinyFlux2Config;

double RelErr(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).norm().item<double>() /
         want.to(at::kDouble).norm().item<double>();
}

// D = 256 (4 heads × 64) as bench_vs_pytorch, one double and one single block: widths where per-row scales
// behave as in the real model (rows of hundreds of values), still milliseconds per forward.
Flux2Config FidelityConfig() {
  Flux2Config c;
  c.in_channels = 16;
  c.num_layers = 1;
  c.num_single_layers = 1;
  c.attention_head_dim = 64;
  c.num_attention_heads = 4;
  c.joint_attention_dim = 32;
  c.axes_dims_rope = {16, 16, 16, 16};
  return c;
}

TEST(QuantizeTensorTest, Int8ErrorIsAtMostHalfAStepPerRow) {
  at::Tensor w = at::randn({64, 300}, at::detail::createCPUGenerator(1));
  w[3].zero_();  // an all-zero row must stay exactly zero (scale 0, no NaN)
  QuantizedWeight q = QuantizeWeight(w, WeightQuant::kInt8);
  ASSERT_EQ(q.data.scalar_type(), at::kChar);
  ASSERT_EQ(q.scale.sizes().vec(), std::vector<int64_t>{64});
  EXPECT_TRUE(at::allclose(q.scale, w.abs().amax(1) / 127.0));
  EXPECT_EQ(q.data.abs().amax().item<int>(), 127);  // each non-zero row uses the full range
  at::Tensor back = DequantizeWeight(q.data, q.scale, at::kFloat);
  EXPECT_TRUE(at::equal(back[3], at::zeros({300})));
  at::Tensor excess = (back - w).abs() - q.scale.unsqueeze(1) * (0.5 + 1e-5);
  EXPECT_LE(excess.max().item<double>(), 0.0);
}

TEST(QuantizeTensorTest, Fp8KeepsThreeMantissaBits) {
  at::Tensor w = at::randn({32, 200}, at::detail::createCPUGenerator(2));
  QuantizedWeight q = QuantizeWeight(w, WeightQuant::kFp8);
  ASSERT_EQ(q.data.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_NEAR(q.data.to(at::kFloat).abs().amax().item<double>(), 448.0, 0.0);
  at::Tensor back = DequantizeWeight(q.data, q.scale, at::kFloat);
  // e4m3 rounds to 3 mantissa bits: relative error ≤ 2^-4 for normal values; subnormals (|w/s| < 2^-6)
  // are off by at most half their spacing 2^-9 · s.
  at::Tensor bound = at::maximum(w.abs() * (1.0 / 16), q.scale.unsqueeze(1) * std::ldexp(1.0, -10)) * (1 + 1e-5);
  EXPECT_TRUE(((back - w).abs() <= bound).all().item<bool>());
}

// The 8-bit autograd node against autograd through a plain matmul with the dequantized weight.
TEST(QuantizeTensorTest, QuantizedMatmulMatchesMatmulOnTheDequantizedWeight) {
  auto gen = at::detail::createCPUGenerator(4);
  QuantizedWeight q = QuantizeWeight(at::randn({24, 40}, gen), WeightQuant::kInt8);
  const at::Tensor x0 = at::randn({2, 5, 40}, gen), g = at::randn({2, 5, 24}, gen);
  at::Tensor xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);
  at::Tensor ya = QuantizedMatmul(xa, q.data, q.scale, at::kFloat);
  at::Tensor yb = at::matmul(xb, DequantizeWeight(q.data, q.scale, at::kFloat).t());
  EXPECT_TRUE(at::equal(ya, yb));
  ya.backward(g);
  yb.backward(g);
  EXPECT_TRUE(at::allclose(xa.grad(), xb.grad(), 1e-6, 1e-6));
}

// Builds a stage from the checkpoint in `dir` holding blocks [begin, end) and runs it on (img, txt).
at::Tensor RunBlocks(const std::string& dir, int64_t begin, int64_t end, WeightQuant q, const at::Tensor& img,
                     const at::Tensor& txt, const Flux2Constants& k) {
  auto ckpt = Flux2Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  auto stage = BuildFlux2Stage(**ckpt, {begin, end, false, false}, at::kFloat, at::kCPU, nullptr, false, q);
  EXPECT_TRUE(stage.ok()) << stage.status();
  at::NoGradGuard no_grad;
  Flux2Activations a;
  a.img = img;
  a.txt = txt;
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : (*stage)(a, k).Live()) parts.push_back(t.flatten());
  return at::cat(parts);
}

// /proc/self/status field in bytes ("VmHWM", "VmRSS"), -1 when unreadable.
int64_t StatusBytes(const std::string& field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field.c_str(), field.size()) == 0 && line[field.size()] == ':') {
      kb = std::strtoll(line + field.size() + 1, nullptr, 10);
    }
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

// The bytes DequantizeWeight takes beyond its inputs, measured: the peak resident set (reset through
// /proc/self/clear_refs) during one call, above the resident set before it. This is the planner's `transient`
// term for one weight (partition.h): the result in the compute dtype plus one fp32 tile, not a whole fp32 copy.
TEST(QuantizeTensorTest, DequantizePeakIsTheResultPlusOneTileAsPlanned) {
  const int64_t rows = 6144, cols = 8192;  // 50 M elements: bf16 result 100 MB, a whole fp32 copy 201 MB
  const QuantizedWeight q = QuantizeWeight(at::randn({rows, cols}), WeightQuant::kInt8);
  // The old single fp32 pass, as the bitwise reference.
  const at::Tensor expected = q.data.to(at::kFloat).mul_(q.scale.unsqueeze(1)).to(at::kBFloat16);
  std::FILE* clear = std::fopen("/proc/self/clear_refs", "w");
  if (clear == nullptr) GTEST_SKIP() << "cannot reset the peak resident set (/proc/self/clear_refs)";
  // Free heap pages another test left resident would hold the result without raising the resident set: returned.
  malloc_trim(0);
  std::fputs("5", clear);  // 5: reset VmHWM to the current VmRSS
  std::fclose(clear);
  const int64_t before = StatusBytes("VmRSS");
  const at::Tensor w = DequantizeWeight(q.data, q.scale, at::kBFloat16);
  const int64_t peak = StatusBytes("VmHWM") - before;
  ASSERT_GT(before, 0);
  EXPECT_TRUE(at::equal(w, expected)) << "tiling changed the arithmetic";
  PlanModel model;
  model.largest_quantized_linear = rows * cols;
  PartitionOptions options;
  options.quantize = WeightQuant::kInt8;
  options.bytes_per_param = 2;
  const int64_t planned = TransientBytes(model, options);
  EXPECT_EQ(planned, rows * cols * 2 + kDequantTileBytes);
  std::printf("[dequant] %lld x %lld int8 -> bf16: measured peak %.1f MB above the inputs, planned %.1f MB\n",
              static_cast<long long>(rows), static_cast<long long>(cols), peak / 1e6, planned / 1e6);
  // At least the result; at most the plan plus allocator slack (8 MiB), and well under result + whole fp32 copy.
  EXPECT_GE(peak, rows * cols * 2) << "measured peak " << peak;
  EXPECT_LE(peak, planned + (int64_t{8} << 20)) << "measured peak " << peak << " vs planned " << planned;
}

TEST(QuantizeFidelityTest, PerBlockRelativeErrorIsBounded) {
  const Flux2Config c = FidelityConfig();
  const std::string dir = MakeTempDir("quant_fidelity");
  ASSERT_TRUE(WriteRandomFlux2Weights(c, dir, 5).ok());
  auto ckpt = Flux2Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  auto shell = BuildFlux2Shell(**ckpt, at::kFloat, at::kCPU);
  ASSERT_TRUE(shell.ok());
  auto in = MakeTinyInputs(c, 1, 8, 8, 16, 3);
  Flux2Constants k;
  {
    at::NoGradGuard no_grad;
    k = (*shell)(in.timestep, in.guidance, in.img_ids, in.txt_ids, at::kFloat);
  }
  auto gen = at::detail::createCPUGenerator(9);
  const at::Tensor img = at::randn({1, 64, c.inner_dim()}, gen), txt = at::randn({1, 16, c.inner_dim()}, gen);
  for (int64_t block = 0; block < c.num_blocks(); ++block) {
    const at::Tensor ref = RunBlocks(dir, block, block + 1, WeightQuant::kNone, img, txt, k);
    const double e8 = RelErr(RunBlocks(dir, block, block + 1, WeightQuant::kInt8, img, txt, k), ref);
    const double f8 = RelErr(RunBlocks(dir, block, block + 1, WeightQuant::kFp8, img, txt, k), ref);
    const char* kind = c.IsDoubleBlock(block) ? "double" : "single";
    std::printf("[fidelity] block %lld (%s, D=%lld): output relative error int8 %.4f%%, fp8 %.4f%%\n",
                static_cast<long long>(block), kind, static_cast<long long>(c.inner_dim()), 100 * e8, 100 * f8);
    EXPECT_LT(e8, 0.01) << kind << " block, int8";
    EXPECT_LT(f8, 0.05) << kind << " block, fp8";
    EXPECT_GT(e8, 0.0);  // it did run quantized
  }
}

TEST(QuantizeModuleTest, EightBitWeightsAreBuffersNotParameters) {
  const Flux2Config c = TinyFlux2Config();
  const std::string dir = MakeTempDir("quant_buffers");
  ASSERT_TRUE(WriteRandomFlux2Weights(c, dir, 1).ok());
  auto ckpt = Flux2Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  LoraSpec spec;
  spec.rank = 2;
  spec.alpha = 2;
  spec.targets = {"to_q", "to_qkv_mlp_proj"};
  auto stage = BuildFlux2Stage(**ckpt, Flux2StageRange::Full(c), at::kFloat, at::kCPU, &spec, true, WeightQuant::kInt8);
  ASSERT_TRUE(stage.ok()) << stage.status();
  for (const auto& p : (*stage)->named_parameters()) {
    EXPECT_TRUE(at::isFloatingType(p.value().scalar_type())) << p.key();
    EXPECT_EQ(p.key().find("weight_scale"), std::string::npos) << p.key();
    if (p.value().requires_grad()) {
      EXPECT_NE(p.key().find("lora_"), std::string::npos) << p.key();
    }
  }
  int eight_bit = 0;
  for (const auto& b : (*stage)->named_buffers()) eight_bit += b.value().scalar_type() == at::kChar;
  EXPECT_EQ(eight_bit, UseQuantizedFlux2Weights(*Flux2Stage(c, Flux2StageRange::Full(c), at::TensorOptions(at::kMeta)),
                                                WeightQuant::kInt8));
  EXPECT_GT(eight_bit, 0);
  // Embedders and head stay in the compute dtype.
  for (const auto& p : (*stage)->named_parameters()) {
    if (p.key() == "x_embedder.weight" || p.key() == "proj_out.weight") {
      EXPECT_EQ(p.value().scalar_type(), at::kFloat);
    }
  }
  for (const auto& [name, t] : LoraParameters(**stage)) EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
}

// What a stage holds matches what the planner counts (FrozenParamBytes over IsQuantizedFlux2Param), and the
// saving it reports: stages built on the meta device (shapes only), the tiny config and FLUX.2-dev in two
// halves (blocks [0, n/2) + embedders, [n/2, n) + head), bf16 compute.
TEST(QuantizeModuleTest, StageBytesMatchThePlannersCount) {
  Flux2Config dev;   // defaults are FLUX.2-dev
  Flux2Config demo;  // the demo's tiny pipeline (baton init-weights --pipeline tiny): D = 64, 2 + 4 blocks
  demo.in_channels = 128;
  demo.num_layers = 2;
  demo.num_single_layers = 4;
  demo.attention_head_dim = 16;
  demo.num_attention_heads = 4;
  demo.joint_attention_dim = 96;
  demo.axes_dims_rope = {4, 4, 4, 4};
  for (const Flux2Config& c : {TinyFlux2Config(), demo, dev}) {
    const int64_t half = c.num_blocks() / 2;
    for (Flux2StageRange range :
         {Flux2StageRange{0, half, true, false}, Flux2StageRange{half, c.num_blocks(), false, true}}) {
      Flux2Stage stage(c, range, at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta));
      const int64_t before = FrozenBytes(*stage);
      int64_t planned = 0;
      for (const auto& p : stage->named_parameters()) {
        const auto shape = p.value().sizes().vec();
        planned += FrozenParamBytes(shape, IsQuantizedFlux2Param(p.key(), shape), 2);
      }
      UseQuantizedFlux2Weights(*stage, WeightQuant::kInt8);
      const int64_t after = FrozenBytes(*stage);
      EXPECT_EQ(after, planned);
      std::printf(
          "[memory] D=%lld blocks [%lld, %lld): frozen weights bf16 %lld B (%.3f GiB) -> int8 %lld B (%.3f GiB), "
          "%.1f%%\n",
          static_cast<long long>(c.inner_dim()), static_cast<long long>(range.block_begin),
          static_cast<long long>(range.block_end), static_cast<long long>(before), before / 1073741824.0,
          static_cast<long long>(after), after / 1073741824.0, 100.0 * after / before);
      if (c.inner_dim() == dev.inner_dim()) {
        EXPECT_LT(after, 0.52 * before);  // blocks are ~all of the bytes
      }
    }
  }
}

// `baton quantize` then load == quantize while loading, bit for bit; the file is what the README says.
TEST(QuantizeCheckpointTest, PreQuantizedForwardIsBitwiseOnTheFly) {
  const Flux2Config c = TinyFlux2Config();
  const std::string dir = MakeTempDir("quant_roundtrip");
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "bf16"), 4, at::kBFloat16, /*max_shard_bytes=*/4096).ok());
  auto src = Flux2Checkpoint::Open(JoinPath(dir, "bf16"));
  ASSERT_TRUE(src.ok());
  auto in = MakeTinyInputs(c, 1, 3, 4, 5, 8);
  for (WeightQuant q : {WeightQuant::kInt8, WeightQuant::kFp8}) {
    const std::string out = JoinPath(dir, WeightQuantName(q));
    QuantizeCheckpointOptions options;
    options.quant = q;
    int lines = 0;
    options.progress = [&](const std::string&) { ++lines; };
    ASSERT_TRUE(WriteQuantizedFlux2Checkpoint(**src, out, options).ok());
    EXPECT_EQ(lines, c.num_blocks());
    EXPECT_TRUE(PathExists(JoinPath(out, "diffusion_pytorch_model.safetensors.index.json")));  // sharded like the input
    auto pre = Flux2Checkpoint::Open(out);
    ASSERT_TRUE(pre.ok()) << pre.status();
    EXPECT_EQ(pre->get()->stored_quant(), q);
    auto shapes = pre->get()->Shape("transformer_blocks.0.attn.to_q.weight");
    ASSERT_TRUE(shapes.ok());
    auto dtype = pre->get()->StoredDtype("transformer_blocks.0.attn.to_q.weight");
    EXPECT_EQ(*dtype, q == WeightQuant::kInt8 ? "I8" : "F8_E4M3");
    EXPECT_EQ(*pre->get()->StoredDtype("transformer_blocks.0.attn.norm_q.weight"), "BF16");
    EXPECT_EQ(*pre->get()->StoredDtype("x_embedder.weight"), "BF16");
    for (const std::string& shard : pre->get()->FilePaths()) {
      auto f = SafetensorsFile::Open(shard);
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(f->get()->metadata().at(kBatonQuantizeMetadataKey), WeightQuantName(q));
      for (const auto& key : f->get()->Keys()) {
        auto e = f->get()->Entry(key);
        int64_t item = e->dtype == "F32" ? 4 : e->dtype == "BF16" ? 2 : 1;
        EXPECT_EQ(e->begin % item, 0u) << key << " is not aligned to its element size";
        if (absl::EndsWith(key, ".weight_scale")) {
          EXPECT_EQ(e->dtype, "F32");
        }
      }
    }
    at::Tensor outs[2];
    for (int i = 0; i < 2; ++i) {
      const Flux2Checkpoint& ck = i == 0 ? **src : **pre;
      auto shell = BuildFlux2Shell(ck, at::kFloat, at::kCPU);
      auto stage = BuildFlux2Stage(ck, Flux2StageRange::Full(c), at::kFloat, at::kCPU, nullptr, false,
                                   i == 0 ? q : WeightQuant::kNone);  // the pre-quantized one needs no flag
      ASSERT_TRUE(shell.ok() && stage.ok()) << stage.status();
      at::NoGradGuard no_grad;
      outs[i] = Flux2Forward(*shell, *stage, in.hidden_states, in.encoder_hidden_states, in.timestep, in.guidance,
                             in.img_ids, in.txt_ids);
    }
    EXPECT_TRUE(at::equal(outs[0], outs[1])) << WeightQuantName(q);
  }
}

TEST(QuantizeCheckpointTest, MismatchedKindIsAClearError) {
  const Flux2Config c = TinyFlux2Config();
  const std::string dir = MakeTempDir("quant_mismatch");
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "full"), 4).ok());
  auto src = Flux2Checkpoint::Open(JoinPath(dir, "full"));
  ASSERT_TRUE(src.ok());
  QuantizeCheckpointOptions options;
  options.quant = WeightQuant::kInt8;
  ASSERT_TRUE(WriteQuantizedFlux2Checkpoint(**src, JoinPath(dir, "int8"), options).ok());
  auto pre = Flux2Checkpoint::Open(JoinPath(dir, "int8"));
  ASSERT_TRUE(pre.ok());
  auto stage =
      BuildFlux2Stage(**pre, Flux2StageRange::Full(c), at::kFloat, at::kCPU, nullptr, false, WeightQuant::kFp8);
  ASSERT_FALSE(stage.ok());
  EXPECT_NE(stage.status().message().find("quantize: fp8 does not match"), absl::string_view::npos) << stage.status();
  EXPECT_NE(stage.status().message().find("pre-quantized as int8"), absl::string_view::npos);
  options.quant = WeightQuant::kFp8;
  EXPECT_FALSE(WriteQuantizedFlux2Checkpoint(**pre, JoinPath(dir, "fp8"), options).ok());
}

// ComfyUI's legacy "scaled fp8" single file (BFL names, marker `scaled_fp8`, per-tensor `scale_weight`),
// written here as ComfyUI documents it: its weights load as per-row fp8 with the tensor's scale on every row.
TEST(QuantizeCheckpointTest, ReadsComfyScaledFp8SingleFiles) {
  const Flux2Config c = TinyFlux2Config();
  const std::string dir = MakeTempDir("quant_comfy");
  auto diffusers = RandomFlux2StateDict(c, 6);
  auto bfl = DiffusersToBflStateDict(diffusers);
  ASSERT_TRUE(bfl.ok());
  std::map<std::string, at::Tensor> file;
  for (const auto& [key, w] : *bfl) {
    const bool block = absl::StartsWith(key, "double_blocks.") || absl::StartsWith(key, "single_blocks.");
    if (!block || w.dim() != 2) {
      file[key] = w.to(at::kBFloat16);
      continue;
    }
    at::Tensor scale = w.abs().amax() / 448.0;  // per tensor, 0-d
    file[key] = (w / scale).to(at::kFloat8_e4m3fn);
    file[key.substr(0, key.size() - 7) + ".scale_weight"] = scale;
    file[key.substr(0, key.size() - 7) + ".scale_input"] = at::ones({}, at::kFloat);
  }
  file["scaled_fp8"] = at::empty({0}, at::kFloat8_e4m3fn);
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "flux2_fp8_scaled.safetensors"), file).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), Flux2ConfigToJson(c)).ok());
  auto ckpt = Flux2Checkpoint::Open(JoinPath(dir, "flux2_fp8_scaled.safetensors"), JoinPath(dir, "config.json"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->get()->stored_quant(), WeightQuant::kFp8);
  auto stage = BuildFlux2Stage(**ckpt, Flux2StageRange::Full(c), at::kFloat, at::kCPU, nullptr, false);
  ASSERT_TRUE(stage.ok()) << stage.status();
  // to_k comes out of the fused qkv: its rows carry the fused tensor's single scale.
  for (auto& [name, linear] : NamedLoraLinears(**stage)) {
    if (name != "transformer_blocks.1.attn.to_k") continue;
    ASSERT_EQ(linear->weight_quant(), WeightQuant::kFp8);
    const at::Tensor qkv = bfl->at("double_blocks.1.img_attn.qkv.weight");
    const at::Tensor scale = qkv.abs().amax() / 448.0;
    EXPECT_TRUE(at::equal(linear->weight_scale, scale.expand({c.inner_dim()})));
    const at::Tensor want = (qkv / scale).to(at::kFloat8_e4m3fn).to(at::kFloat).chunk(3, 0)[1] * scale;
    EXPECT_TRUE(at::equal(linear->frozen_weight(), want));
    EXPECT_LT(RelErr(linear->frozen_weight(), diffusers.at(name + ".weight")), 0.05);
  }
  // A ComfyUI layer in a format other than float8_e4m3fn is refused by name.
  std::vector<uint8_t> record = {'{', '"', 'f', 'o', 'r', 'm', 'a', 't', '"',
                                 ':', '"', 'n', 'v', 'f', 'p', '4', '"', '}'};
  file["double_blocks.0.img_attn.proj.comfy_quant"] = at::tensor(at::ArrayRef<uint8_t>(record), at::kByte);
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "nvfp4.safetensors"), file).ok());
  auto bad = Flux2Checkpoint::Open(JoinPath(dir, "nvfp4.safetensors"), JoinPath(dir, "config.json"));
  ASSERT_TRUE(bad.ok());
  auto refused = BuildFlux2Stage(**bad, Flux2StageRange::Full(c), at::kFloat, at::kCPU, nullptr, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("uses ComfyUI quantization format 'nvfp4'"), absl::string_view::npos)
      << refused.status();
}

TEST(QuantizeCheckpointTest, BlockWiseScalesAreRefused) {
  const std::string path = JoinPath(MakeTempDir("quant_blockwise"), "b.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"l.weight", at::zeros({256, 256}, at::kChar)},
                                      {"l.weight_scale", at::ones({2, 2}, at::kFloat)}})
                  .ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  auto loaded = LoadEightBitWeight(**f, "l.weight", **f, "l.weight_scale");
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("block-wise scales are not"), absl::string_view::npos) << loaded.status();
}

}  // namespace
}  // namespace baton
