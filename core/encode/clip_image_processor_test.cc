// CLIPImageProcessor: PIL's resampling against values printed by Pillow 13 (Image.resize on a fixed 7x5 pattern),
// preprocessor_config.json in its current and legacy forms, the resize arithmetic, crop padding and normalisation.
// The whole pipeline against transformers itself: tests/upstream/test_clip_vision.py.
#include "core/encode/clip_image_processor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace baton {
namespace {

// The 7x5 pattern: pixel (x, y) = ((37x + 11y) % 256, (255 - 29x + 53y) % 256, (41xy + 7) % 256).
Image Pattern() {
  Image im(7, 5);
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 7; ++x) {
      uint8_t* p = im.at(x, y);
      p[0] = static_cast<uint8_t>((x * 37 + y * 11) % 256);
      p[1] = static_cast<uint8_t>(((255 - x * 29 + y * 53) % 256 + 256) % 256);
      p[2] = static_cast<uint8_t>((x * y * 41 + 7) % 256);
    }
  }
  return im;
}

void ExpectPixels(const Image& got, int width, int height, const std::vector<int>& want, const char* what) {
  ASSERT_EQ(got.width, width) << what;
  ASSERT_EQ(got.height, height) << what;
  ASSERT_EQ(got.pixels.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(static_cast<int>(got.pixels[i]), want[i]) << what << " @" << i;
}

TEST(PilResizeTest, MatchesPillow) {
  const Image src = Pattern();
  EXPECT_EQ(src.pixels[3 * (7 * 1 + 1) + 1], 23);  // (255 - 29 + 53) % 256, as numpy stored it for Pillow
  auto down = PilResize(src, 3, 2, PilResample::kBicubic);
  ASSERT_TRUE(down.ok()) << down.status();
  ExpectPixels(*down, 3, 2, {36, 129, 36, 120, 168, 100, 207, 153, 138, 62, 136, 94, 148, 92, 184, 196, 116, 172},
               "bicubic 3x2");
  auto up = PilResize(src, 11, 8, PilResample::kBicubic);
  ASSERT_TRUE(up.ok()) << up.status();
  // Row 0 and row 7 of Pillow's 11x8 (the clipped overshoot at both ends of a bicubic upscale).
  const std::vector<int> row0 = {0, 255, 7,   12, 255, 6,   39, 237, 4,   63, 205, 2,  86, 181, 0,  110, 164,
                                 0, 134, 146, 0,  157, 127, 0,  181, 109, 0,  208, 88, 0,  224, 75, 0};
  const std::vector<int> row7 = {42,  217, 0,   58,  204, 82, 85,  183, 173, 109, 165, 83, 132, 146, 125, 156, 128,
                                 252, 180, 110, 194, 210, 91, 112, 236, 74,  54,  93,  41, 148, 0,   19,  234};
  for (size_t i = 0; i < row0.size(); ++i) EXPECT_EQ(static_cast<int>(up->pixels[i]), row0[i]) << "row 0 @" << i;
  ASSERT_EQ(up->pixels.size(), 11u * 8 * 3);
  for (size_t i = 0; i < row7.size(); ++i) {
    EXPECT_EQ(static_cast<int>(up->pixels[11u * 7 * 3 + i]), row7[i]) << "row 7 @" << i;
  }
  auto bilinear = PilResize(src, 4, 5, PilResample::kBilinear);  // one axis only: the vertical pass is skipped
  ASSERT_TRUE(bilinear.ok());
  ExpectPixels(*bilinear, 4, 5,
               {19,  240, 7,   77,  195, 7,   145, 141, 7,  203, 96,  7,   30,  49,  28,  88,  196, 92,  156, 194,
                168, 214, 149, 232, 41,  90,  50,  99,  45, 178, 167, 176, 144, 225, 202, 200, 52,  143, 71,  110,
                98,  191, 178, 44,  182, 236, 133, 181, 63, 196, 81,  121, 151, 143, 189, 97,  158, 113, 52,  149},
               "bilinear 4x5");
  auto lanczos = PilResize(src, 7, 3, PilResample::kLanczos);  // the horizontal pass is skipped
  ASSERT_TRUE(lanczos.ok());
  ExpectPixels(*lanczos, 7, 3,
               {4,  167, 7, 41, 138, 20,  78,  228, 29,  115, 199, 60,  152, 170, 69,  189, 141, 96,  221, 94,  109,
                22, 87,  7, 59, 58,  89,  96,  100, 189, 133, 71,  200, 170, 192, 150, 207, 163, 179, 255, 205, 255,
                40, 198, 7, 77, 169, 158, 114, 122, 158, 151, 93,  190, 188, 64,  190, 225, 35,  71,  112, 125, 222},
               "lanczos 7x3");
}

TEST(PilResizeTest, ShrinkingMostlyInHeightRunsTheVerticalPassFirst) {
  // 7x5 -> 6x2: the height loses 3 rows, more than twice the 1 column the width loses, so Pillow 13 resamples
  // vertically first (the horizontal-first result differs in both). 7x5 -> 5x2 goes horizontal first.
  const Image src = Pattern();
  auto bicubic = PilResize(src, 6, 2, PilResample::kBicubic);
  ASSERT_TRUE(bicubic.ok());
  ExpectPixels(*bicubic, 6, 2, {12, 127, 10, 55, 125, 53,  98,  172, 100, 142, 171, 102, 185, 166, 119, 235, 136, 163,
                                38, 155, 22, 81, 124, 149, 124, 92,  189, 168, 96,  191, 214, 88,  124, 176, 148, 221},
               "bicubic 6x2");
  auto lanczos = PilResize(src, 6, 2, PilResample::kLanczos);
  ASSERT_TRUE(lanczos.ok());
  ExpectPixels(*lanczos, 6, 2, {12, 123, 9,  55, 125, 52,  99,  170, 104, 141, 169, 99,  184, 171, 118, 241, 139, 163,
                                38, 150, 22, 81, 121, 152, 125, 87,  193, 166, 99,  200, 215, 92,  123, 176, 147, 225},
               "lanczos 6x2");
  auto other = PilResize(src, 5, 2, PilResample::kBicubic);
  ASSERT_TRUE(other.ok());
  ExpectPixels(*other, 5, 2, {18, 120, 15, 67, 147, 68,  120, 167, 107, 173, 173, 109, 228, 139, 157,
                              44, 150, 42, 93, 115, 164, 146, 87,  197, 202, 95,  144, 185, 135, 198},
               "bicubic 5x2");
}

TEST(PilResizeTest, SameSizeIsACopyAndNearestIsRefused) {
  const Image src = Pattern();
  auto same = PilResize(src, 7, 5, PilResample::kBicubic);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->pixels, src.pixels);
  EXPECT_EQ(PilResize(src, 3, 3, PilResample::kNearest).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(PilResize(src, 0, 3, PilResample::kBicubic).status().code(), absl::StatusCode::kInvalidArgument);
}

constexpr char kWanProcessorJson[] = R"({
  "crop_size": {"height": 224, "width": 224},
  "do_center_crop": true, "do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize": true,
  "image_mean": [0.48145466, 0.4578275, 0.40821073],
  "image_processor_type": "CLIPImageProcessor",
  "image_std": [0.26862954, 0.26130258, 0.27577711],
  "resample": 3, "rescale_factor": 0.00392156862745098,
  "size": {"shortest_edge": 224}
})";

// laion/CLIP-ViT-H-14's file (a CLIPFeatureExtractor's: bare ints, no rescale fields).
constexpr char kLegacyProcessorJson[] = R"({
  "crop_size": 224, "do_center_crop": true, "do_normalize": true, "do_resize": true,
  "feature_extractor_type": "CLIPFeatureExtractor",
  "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
  "resample": 3, "size": 224
})";

TEST(ClipImageProcessorConfigTest, ParsesCurrentAndLegacyForms) {
  for (const char* text : {kWanProcessorJson, kLegacyProcessorJson, "{}"}) {
    auto c = ParseClipImageProcessorConfig(text, "preprocessor_config.json");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->shortest_edge, 224);
    EXPECT_EQ(c->longest_edge, 0);
    EXPECT_EQ(c->crop_height, 224);
    EXPECT_EQ(c->crop_width, 224);
    EXPECT_EQ(c->resample, PilResample::kBicubic);
    EXPECT_TRUE(c->do_rescale && c->do_normalize && c->do_center_crop && c->do_resize);
    EXPECT_DOUBLE_EQ(c->rescale_factor, 1.0 / 255.0);
    EXPECT_DOUBLE_EQ(c->image_std[2], 0.27577711);
  }
  auto hw = ParseClipImageProcessorConfig(
      R"({"size": {"height": 100, "width": 50}, "crop_size": {"height": 30, "width": 40}, "image_mean": 0.5,
          "resample": 2})",
      "x");
  ASSERT_TRUE(hw.ok()) << hw.status();
  EXPECT_EQ(hw->shortest_edge, 0);
  EXPECT_EQ(hw->resize_height, 100);
  EXPECT_EQ(hw->resize_width, 50);
  EXPECT_EQ(hw->crop_width, 40);
  EXPECT_EQ(hw->image_mean[1], 0.5);
  EXPECT_EQ(hw->resample, PilResample::kBilinear);
  // Round trip through what save_pretrained would write.
  auto again = ParseClipImageProcessorConfig(ClipImageProcessorConfigToJson(*hw), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->resize_height, 100);
  EXPECT_EQ(again->crop_height, 30);
  EXPECT_EQ(again->image_mean, hw->image_mean);
}

TEST(ClipImageProcessorConfigTest, RejectsWhatItCannotDo) {
  struct Case {
    const char* json;
    absl::StatusCode code;
    const char* says;
  } cases[] = {
      {R"({"resample": 0})", absl::StatusCode::kUnimplemented, "NEAREST"},
      {R"({"resample": 9})", absl::StatusCode::kInvalidArgument, "resample"},
      {R"({"size": {"longest_edge": 30}})", absl::StatusCode::kUnimplemented, "longest_edge"},
      {R"({"size": {"height": 30}})", absl::StatusCode::kInvalidArgument, "height and width"},
      {R"({"crop_size": {"height": 30}})", absl::StatusCode::kInvalidArgument, "crop_size"},
      {R"({"image_std": [1, 2]})", absl::StatusCode::kInvalidArgument, "image_std"},
      {R"({"image_std": 0})", absl::StatusCode::kInvalidArgument, "image_std"},
      {R"({"size": -3})", absl::StatusCode::kInvalidArgument, "size"},
      {R"([1])", absl::StatusCode::kInvalidArgument, "JSON object"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseClipImageProcessorConfig(c.json, "cfg.json");
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), c.code) << c.json << ": " << parsed.status();
    EXPECT_NE(parsed.status().message().find(c.says), std::string::npos) << parsed.status();
  }
}

using Hw = std::pair<int64_t, int64_t>;  // (height, width)

TEST(ClipImageProcessorTest, ResizedSizeIsTransformers) {
  ClipImageProcessor p(ClipImageProcessorConfig{});
  // get_resize_output_image_size: the short side becomes 224, the long int(224 * long / short).
  EXPECT_EQ(p.ResizedSize(480, 832), (Hw{224, 388}));
  EXPECT_EQ(p.ResizedSize(832, 480), (Hw{388, 224}));
  EXPECT_EQ(p.ResizedSize(300, 300), (Hw{224, 224}));
  EXPECT_EQ(p.ResizedSize(100, 1000), (Hw{224, 2240}));
  EXPECT_EQ(p.ResizedSize(7, 5), (Hw{313, 224}));  // int(313.6)
  ClipImageProcessorConfig c;
  c.shortest_edge = 20;
  c.longest_edge = 30;
  // get_size_with_aspect_ratio: 100x50 would be 40x20 > 30, so raw 15.0 → 30x15; 40x30 fits: 26x20 (int 26.67).
  EXPECT_EQ(ClipImageProcessor(c).ResizedSize(100, 50), (Hw{30, 15}));
  EXPECT_EQ(ClipImageProcessor(c).ResizedSize(40, 30), (Hw{26, 20}));
}

TEST(ClipImageProcessorTest, NormalisesAndPadsTheCrop) {
  ClipImageProcessorConfig c;
  c.do_resize = false;  // a 3x2 image center-cropped to 5x4: transformers pads it with zero pixels
  c.crop_height = 4;
  c.crop_width = 5;
  Image im(3, 2);
  for (size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = 200;
  auto t = ClipImageProcessor(c).Preprocess(im);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->sizes(), (std::vector<int64_t>{1, 3, 4, 5}));
  for (int ch = 0; ch < 3; ++ch) {
    const float mean = static_cast<float>(c.image_mean[ch]), std_dev = static_cast<float>(c.image_std[ch]);
    const float inside = (static_cast<float>(200 * (1.0 / 255.0)) - mean) / std_dev;
    const float zero = (0.0f - mean) / std_dev;
    // Rows: top = (2 - 4) // 2 = -1, so output rows 1..2 are the image; columns: left = (3 - 5) // 2 = -1.
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 5; ++x) {
        const bool in = y >= 1 && y <= 2 && x >= 1 && x <= 3;
        EXPECT_EQ((*t)[0][ch][y][x].item<float>(), in ? inside : zero) << ch << " " << y << " " << x;
      }
    }
  }
}

TEST(ClipImageProcessorTest, BatchesAndRejectsBadImages) {
  ClipImageProcessor p(ClipImageProcessorConfigForSize(16));
  Image a = Pattern(), b(40, 9);
  auto batch = p.Preprocess(std::vector<Image>{a, b});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->sizes(), (std::vector<int64_t>{2, 3, 16, 16}));
  auto single = p.Preprocess(a);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(at::equal((*batch)[0], (*single)[0]));
  Image broken(4, 4);
  broken.pixels.resize(5);
  EXPECT_EQ(p.Preprocess(broken).status().code(), absl::StatusCode::kInvalidArgument);
  ClipImageProcessorConfig no_crop = ClipImageProcessorConfigForSize(16);
  no_crop.do_center_crop = false;
  auto mixed = ClipImageProcessor(no_crop).Preprocess(std::vector<Image>{a, b});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("image 1"), std::string::npos) << mixed.status();
}

}  // namespace
}  // namespace baton
