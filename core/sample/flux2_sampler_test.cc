// The FLUX.2 sampling loop without a model: the schedule against values diffusers' scheduler printed, the Euler
// update against its closed form, the micro-batch grouping, and the PNG postprocess and contact sheet.
#include "core/sample/flux2_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/sample/sample_images.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"

namespace baton {
namespace {

// FlowMatchEulerDiscreteScheduler(shift=3, use_dynamic_shifting, exponential).set_timesteps(sigmas=linspace(1,
// 1/steps, steps), mu=compute_empirical_mu(tokens, steps)).sigmas, as diffusers printed them (float32 → double).
TEST(Flux2SamplerTest, SigmasEqualTheSchedulersToTheBit) {
  const std::vector<double> four = Flux2SampleSigmas(4, 12);
  ASSERT_EQ(four.size(), 5u);
  EXPECT_EQ(four[0], 1.0);
  EXPECT_EQ(four[1], 0.9545006155967712);
  EXPECT_EQ(four[2], 0.8748869895935059);
  EXPECT_EQ(four[3], 0.6997830271720886);
  EXPECT_EQ(four[4], 0.0);

  const std::vector<double> demo = Flux2SampleSigmas(28, 64);
  ASSERT_EQ(demo.size(), 29u);
  EXPECT_EQ(demo[1], 0.9937174916267395);
  EXPECT_EQ(demo[2], 0.9870393872261047);
  EXPECT_EQ(demo[26], 0.3106449246406555);
  EXPECT_EQ(demo[27], 0.17828744649887085);

  // 1024x1024 (4096 tokens) and past the 4300-token branch of compute_empirical_mu.
  EXPECT_EQ(Flux2SampleSigmas(28, 4096)[27], 0.24151459336280823);
  EXPECT_EQ(Flux2SampleSigmas(8, 6000)[7], 0.3837589919567108);
}

TEST(Flux2SamplerTest, InitialNoiseIsTheSeededDrawPacked) {
  const at::Tensor a = Flux2InitialNoise(8, 64, 32, 7);
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{1, 8, 8}));
  EXPECT_TRUE(at::equal(a, Flux2InitialNoise(8, 64, 32, 7)));
  EXPECT_FALSE(at::equal(a, Flux2InitialNoise(8, 64, 32, 8)));
  // Packing [1, C, h, w] → [1, h·w, C]: token (y, x) holds channel values at (y, x).
  auto gen = at::detail::createCPUGenerator(7);
  const at::Tensor raw = at::randn({1, 8, 2, 4}, gen, at::kFloat);
  EXPECT_TRUE(at::equal(a[0][1 * 4 + 3], raw[0].select(1, 1).select(1, 3)));
}

// A denoiser whose velocity is constant: Euler over any schedule from σ=1 to 0 moves every latent by −v in total.
TEST(Flux2SamplerTest, EulerWithAConstantVelocityEndsAtNoiseMinusVelocity) {
  Flux2SampleSettings s;
  s.steps = 5;
  s.width = 48;
  s.height = 32;
  s.micro_batch_size = 2;
  const int64_t tokens = 6, channels = 4;
  std::vector<at::Tensor> noise, embeds;
  for (int k = 0; k < 3; ++k) {
    noise.push_back(Flux2InitialNoise(channels, s.width, s.height, k));
    embeds.push_back(at::full({5, 16}, static_cast<float>(k)));
  }
  std::vector<std::vector<int64_t>> batch_sizes;
  std::vector<float> timesteps;
  Denoiser denoiser = [&](const std::vector<NoisyBatch>& batches) -> absl::StatusOr<std::vector<at::Tensor>> {
    std::vector<int64_t> sizes;
    std::vector<at::Tensor> out;
    for (const NoisyBatch& b : batches) {
      sizes.push_back(b.noisy.size(0));
      EXPECT_EQ(b.grid_h, 2);
      EXPECT_EQ(b.grid_w, 3);
      EXPECT_EQ(b.guidance, s.guidance);
      // Every row's velocity is its prompt's value, so a prompt mixed up with another would show.
      out.push_back(b.prompt_embeds.select(2, 0).select(1, 0).reshape({-1, 1, 1}).expand({-1, tokens, channels}) +
                    at::zeros_like(b.noisy));
    }
    timesteps.push_back(batches[0].timestep[0].item<float>());
    batch_sizes.push_back(sizes);
    return out;
  };
  int progress_calls = 0;
  auto result = SampleFlux2(denoiser, embeds, noise, s, [&](int64_t step, int64_t steps) {
    ++progress_calls;
    EXPECT_EQ(step, progress_calls);
    EXPECT_EQ(steps, 5);
  });
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(at::allclose((*result)[k], noise[k] - static_cast<float>(k), 0, 1e-5)) << k;
  }
  EXPECT_EQ(progress_calls, 5);
  ASSERT_EQ(batch_sizes.size(), 5u);
  EXPECT_EQ(batch_sizes[0], (std::vector<int64_t>{2, 1}));
  const std::vector<double> sigmas = Flux2SampleSigmas(5, tokens);
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(timesteps[i], sigmas[i]);
}

// True classifier-free guidance (a klein base model): each step's micro-batches twice, the prompts' then the negative
// prompt's at the same latents, combined as Flux2KleinPipeline does, neg + guidance·(pos − neg); and which folders
// want it (model_index.json).
TEST(Flux2SamplerTest, TrueCfgCombinesThePromptsAndTheNegativePromptsVelocities) {
  Flux2SampleSettings s;
  s.steps = 3;
  s.width = 48;
  s.height = 32;
  s.guidance = 2.5;
  s.negative_prompt_embeds = at::full({5, 16}, 10.0f);
  std::vector<at::Tensor> noise, embeds;
  for (int k = 0; k < 2; ++k) {
    noise.push_back(Flux2InitialNoise(4, s.width, s.height, k));
    embeds.push_back(at::full({5, 16}, static_cast<float>(k + 1)));
  }
  std::vector<size_t> batches_per_call;
  Denoiser denoiser = [&](const std::vector<NoisyBatch>& batches) -> absl::StatusOr<std::vector<at::Tensor>> {
    batches_per_call.push_back(batches.size());
    std::vector<at::Tensor> out;
    for (const NoisyBatch& b : batches) {
      out.push_back(b.prompt_embeds.select(2, 0).select(1, 0).reshape({-1, 1, 1}) + at::zeros_like(b.noisy));
    }
    return out;
  };
  auto result = SampleFlux2(denoiser, embeds, noise, s);
  ASSERT_TRUE(result.ok()) << result.status();
  for (int k = 0; k < 2; ++k) {
    const float v = 10.0f + 2.5f * (static_cast<float>(k + 1) - 10.0f);
    EXPECT_TRUE(at::allclose((*result)[k], noise[k] - v, 0, 1e-4)) << k;
  }
  EXPECT_EQ(batches_per_call, (std::vector<size_t>{4, 4, 4}));  // 2 prompts, 1 per micro-batch, twice

  const std::string dir = test_util::MakeTempDir("flux2_cfg");
  auto index = [&](const std::string& json) {
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "model_index.json"), json).ok());
  };
  index(R"({"_class_name": "Flux2KleinPipeline", "is_distilled": false})");
  EXPECT_TRUE(*Flux2TrueCfg(dir, 4.0));
  EXPECT_FALSE(*Flux2TrueCfg(dir, 1.0));
  index(R"({"_class_name": "Flux2KleinPipeline", "is_distilled": true})");
  EXPECT_FALSE(*Flux2TrueCfg(dir, 4.0));
  index(R"({"_class_name": "Flux2Pipeline"})");
  EXPECT_FALSE(*Flux2TrueCfg(dir, 4.0));
  EXPECT_FALSE(*Flux2TrueCfg(JoinPath(dir, "transformer"), 4.0));  // no model_index.json
}

TEST(Flux2SamplerTest, BadInputsAreRefused) {
  Denoiser never = [](const std::vector<NoisyBatch>&) -> absl::StatusOr<std::vector<at::Tensor>> {
    ADD_FAILURE() << "the denoiser ran";
    return std::vector<at::Tensor>{};
  };
  Flux2SampleSettings s;
  s.width = s.height = 32;
  const at::Tensor n = Flux2InitialNoise(4, 32, 32, 0);
  const at::Tensor e = at::zeros({5, 16});
  EXPECT_FALSE(SampleFlux2(never, {e, e}, {n}, s).ok());
  s.width = 40;
  EXPECT_FALSE(SampleFlux2(never, {e}, {n}, s).ok());
  s.width = 48;
  EXPECT_FALSE(SampleFlux2(never, {e}, {n}, s).ok());  // 6 tokens expected, noise has 4
  s.width = 32;
  EXPECT_FALSE(SampleFlux2(never, {e, at::zeros({6, 16})}, {n, n}, s).ok());
}

TEST(Flux2SamplerTest, PixelsArePostprocessedAsDiffusersRoundsThem) {
  // x/2 + 0.5 clamped, ·255, rounded half to even: −1 → 0, 1 → 255, 0 → 127.5 → 128, out of range clamped.
  at::Tensor pixels = at::tensor({-1.0f, 1.0f, 0.0f, -3.0f, 3.0f, 0.5f}).reshape({3, 1, 2});
  const Image image = PixelsToImage(pixels);
  ASSERT_EQ(image.width, 2);
  ASSERT_EQ(image.height, 1);
  EXPECT_EQ(image.at(0, 0)[0], 0);
  EXPECT_EQ(image.at(1, 0)[0], 255);
  EXPECT_EQ(image.at(0, 0)[1], 128);
  EXPECT_EQ(image.at(1, 0)[1], 0);
  EXPECT_EQ(image.at(0, 0)[2], 255);
  EXPECT_EQ(image.at(1, 0)[2], 191);  // 0.75 · 255 = 191.25
}

TEST(Flux2SamplerTest, ContactSheetPlacesImagesInAGridWithBorders) {
  std::vector<Image> images;
  for (int k = 0; k < 3; ++k) {
    Image im(8, 6);
    for (uint8_t& p : im.pixels) p = static_cast<uint8_t>(10 * (k + 1));
    images.push_back(im);
  }
  const Image sheet = ContactSheet(images);  // 3 images: 2 columns, 2 rows
  EXPECT_EQ(sheet.width, 2 * 8 + 3 * 4);
  EXPECT_EQ(sheet.height, 2 * 6 + 3 * 4);
  EXPECT_EQ(sheet.at(0, 0)[0], 255);
  EXPECT_EQ(sheet.at(4, 4)[0], 10);
  EXPECT_EQ(sheet.at(4 + 8 + 4, 4)[0], 20);
  EXPECT_EQ(sheet.at(4, 4 + 6 + 4)[0], 30);
  const Image row = ContactSheet(images, 3);
  EXPECT_EQ(row.width, 3 * 8 + 4 * 4);
  EXPECT_EQ(row.height, 6 + 2 * 4);
}

}  // namespace
}  // namespace baton
