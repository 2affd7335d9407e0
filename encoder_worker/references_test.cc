// The control folder's layout (musubi-tuner's control_directory): which files are a sample's reference images, in
// which order, and the layouts refused by name.
#include "encoder_worker/references.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace baton {
namespace {

std::vector<std::string> Sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

TEST(FindReferenceFilesTest, OneByTheImagesNameOrSeveralNumbered) {
  const auto names = Sorted({"cat.png", "dog_0.jpg", "dog_1.PNG", "dog_10.png", "dog_2.jpeg", "dog.txt", "dogma.png",
                             "dog_x.png", "bird_1.png", "notes.md"});
  auto cat = FindReferenceFiles("cat.jpg", names);  // the image's extension does not matter
  ASSERT_TRUE(cat.ok()) << cat.status();
  EXPECT_EQ(*cat, std::vector<std::string>{"cat.png"});
  auto dog = FindReferenceFiles("dog.png", names);  // by number, not by name: 10 after 2; dogma and dog_x are not
  ASSERT_TRUE(dog.ok()) << dog.status();
  EXPECT_EQ(*dog, (std::vector<std::string>{"dog_0.jpg", "dog_1.PNG", "dog_2.jpeg", "dog_10.png"}));
  auto bird = FindReferenceFiles("bird.png", names);  // numbering need not start at 0
  ASSERT_TRUE(bird.ok());
  EXPECT_EQ(*bird, std::vector<std::string>{"bird_1.png"});
  auto fish = FindReferenceFiles("fish.png", names);
  ASSERT_TRUE(fish.ok());
  EXPECT_TRUE(fish->empty());
}

TEST(FindReferenceFilesTest, AmbiguousOrTooManyAreRefusedByName) {
  auto both = FindReferenceFiles("cat.png", Sorted({"cat.png", "cat_0.png"}));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("cat.png: the control folder holds cat.png, cat_0.png"), std::string::npos)
      << both.status();
  auto two = FindReferenceFiles("cat.png", Sorted({"cat.png", "cat.jpg"}));
  EXPECT_FALSE(two.ok());
  auto same = FindReferenceFiles("cat.png", Sorted({"cat_1.png", "cat_01.jpg"}));
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.status().message().find("reference 1 is"), std::string::npos) << same.status();
  auto many = FindReferenceFiles("cat.png", Sorted({"cat_0.png", "cat_1.png", "cat_2.png", "cat_3.png", "cat_4.png"}));
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("5 reference images"), std::string::npos) << many.status();
  EXPECT_NE(many.status().message().find("at most 4"), std::string::npos) << many.status();
}

}  // namespace
}  // namespace baton
