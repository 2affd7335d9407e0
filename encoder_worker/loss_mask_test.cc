// Masked loss on the encoder's side (loss_mask.h): which file is a sample's mask, what a mask must be, and its value on
// the latent grid against a hand computation.
#include "encoder_worker/loss_mask.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

// A w x h gray image: `left` on the left half, `right` on the right half.
Image TwoHalves(int w, int h, uint8_t left, uint8_t right) {
  Image img(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.at(x, y);
      p[0] = p[1] = p[2] = x < w / 2 ? left : right;
    }
  }
  return img;
}

TEST(LossMaskTest, AMaskIsTheStemWithDotMaskAndOneImageExtension) {
  const std::vector<std::string> names = {"a.jpg",      "a.mask.png", "a.txt", "b.png",      "b.txt",         "c.JPG",
                                          "c.mask.JPG", "c.mask.png", "c.txt", "d.Mask.Png", "d.masking.png", "d.png"};
  EXPECT_EQ(*FindMaskFile("a.jpg", names), "a.mask.png");
  EXPECT_EQ(*FindMaskFile("b.png", names), "");
  EXPECT_EQ(*FindMaskFile("d.png", names), "d.Mask.Png");  // any case, as the scan takes it for a mask
  auto two = FindMaskFile("c.JPG", names);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("c.JPG has two masks, c.mask.JPG and c.mask.png"), std::string::npos)
      << two.status();
}

TEST(LossMaskTest, AMaskMustBeGrayOfItsImagesSizeAndWhiteSomewhere) {
  EXPECT_TRUE(CheckMaskImage(TwoHalves(32, 16, 255, 0), 32, 16, "m.png").ok());
  Image colored = TwoHalves(32, 16, 255, 0);
  colored.at(3, 2)[1] = 7;
  auto bad = CheckMaskImage(colored, 32, 16, "m.png");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("m.png: the mask is not gray-scale (pixel 3,2 is RGB 255,7,255)"), std::string::npos)
      << bad;
  auto size = CheckMaskImage(TwoHalves(32, 16, 255, 0), 64, 16, "m.png");
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.message().find("the mask is 32x16, its image 64x16"), std::string::npos) << size;
  auto black = CheckMaskImage(TwoHalves(32, 16, 0, 0), 32, 16, "m.png");
  ASSERT_FALSE(black.ok());
  EXPECT_NE(black.message().find("black everywhere"), std::string::npos) << black;
}

TEST(LossMaskTest, EachLatentCellIsTheMeanOfItsPixels) {
  // 64 x 32 pixels onto a 2 x 4 grid of 16-pixel cells: the left two columns white, the right two gray 64.
  at::Tensor grid = MaskOnLatentGrid(TwoHalves(64, 32, 255, 64), 2, 4);
  const float g = 64.0f / 255.0f;
  at::Tensor want = at::tensor({1.0f, 1.0f, g, g, 1.0f, 1.0f, g, g}).reshape({2, 4});
  EXPECT_TRUE(at::allclose(grid, want, 0, 1e-7)) << grid;
  // A cell astride the edge averages: 48 x 16 onto 1 x 3 cells of 16, the edge at x = 24 (cell 1's middle).
  at::Tensor edge = MaskOnLatentGrid(TwoHalves(48, 16, 255, 0), 1, 3);
  EXPECT_TRUE(at::allclose(edge, at::tensor({1.0f, 0.5f, 0.0f}).reshape({1, 3}), 0, 1e-7)) << edge;
}

}  // namespace
}  // namespace baton
