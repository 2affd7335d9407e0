#include "core/text/nfc.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(NfcTest, AsciiUnchanged) { EXPECT_EQ(NfcNormalize("plain ASCII, 123\n"), "plain ASCII, 123\n"); }

TEST(NfcTest, ComposesDecomposedAccents) {
  EXPECT_EQ(NfcNormalize("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(NfcNormalize("A\u030a"), "\u00c5");
  // Marks out of canonical order are reordered (dot below, class 220, before acute, class 230), then
  // both compose: s + dot below → ṣ; ṣ + dot above → ṩ.
  EXPECT_EQ(NfcNormalize("s\u0307\u0323"), "\u1e69");
}

TEST(NfcTest, SingletonsAndExclusionsStayDecomposed) {
  EXPECT_EQ(NfcNormalize("\u212b"), "\u00c5");        // ANGSTROM SIGN → Å (singleton decomposition)
  EXPECT_EQ(NfcNormalize("\u0958"), "\u0915\u093c");  // DEVANAGARI QA is a composition exclusion
  EXPECT_EQ(NfcNormalize("\u0915\u093c"), "\u0915\u093c");
}

TEST(NfcTest, BlockedMarksDoNotCompose) {
  // a + grave (230) + acute (230): the acute is blocked by the grave of the same class.
  EXPECT_EQ(NfcNormalize("a\u0300\u0301"), "\u00e0\u0301");
}

TEST(NfcTest, HangulJamoCompose) {
  EXPECT_EQ(NfcNormalize("\u1100\u1161\u11a8"), "\uac01");  // ᄀ + ᅡ + ᆨ → 각
  EXPECT_EQ(NfcNormalize("\uac01"), "\uac01");
}

TEST(NfcTest, InvalidBytesPassThrough) {
  EXPECT_EQ(NfcNormalize("e\xff\xcc\x81"), "e\xff\xcc\x81");  // 0xFF between e and the acute blocks it
  EXPECT_EQ(NfcNormalize("\xe2\x82"), "\xe2\x82");            // truncated sequence
}

TEST(NfcTest, CombiningClasses) {
  EXPECT_EQ(CanonicalCombiningClass('a'), 0);
  EXPECT_EQ(CanonicalCombiningClass(0x301), 230);
  EXPECT_EQ(CanonicalCombiningClass(0x323), 220);
}

}  // namespace
}  // namespace baton
