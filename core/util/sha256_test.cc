#include "core/util/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace baton {
namespace {

// Test vectors from NIST FIPS 180-4 examples (SHA256.pdf) and the NIST CAVP "long message" set.
TEST(Sha256Test, FipsVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmn"
                      "opqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256Test, MillionAs) {
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the 55/56/64-byte padding boundaries, fed in uneven chunks, must equal one-shot.
TEST(Sha256Test, StreamingMatchesOneShotAtPaddingBoundaries) {
  for (size_t len : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000}) {
    std::string msg;
    for (size_t i = 0; i < len; ++i) msg.push_back(static_cast<char>((i * 131 + 7) & 0xff));
    for (size_t chunk : {1, 3, 17, 64, 100}) {
      Sha256 h;
      for (size_t pos = 0; pos < msg.size(); pos += chunk) {
        h.Update(absl::string_view(msg).substr(pos, chunk));
      }
      EXPECT_EQ(DigestToHex(h.Finish()), Sha256Hex(msg)) << "len=" << len << " chunk=" << chunk;
    }
  }
}

TEST(Sha256Test, FinishResetsForNextMessage) {
  Sha256 h;
  h.Update("garbage");
  h.Finish();
  h.Update("abc");
  EXPECT_EQ(DigestToHex(h.Finish()), Sha256Hex("abc"));
}

TEST(Sha256Test, FramingSeparatesFieldBoundaries) {
  Sha256 a;
  a.UpdateFramed("ab");
  a.UpdateFramed("c");
  Sha256 b;
  b.UpdateFramed("a");
  b.UpdateFramed("bc");
  EXPECT_NE(DigestToHex(a.Finish()), DigestToHex(b.Finish()));
  // UpdateFramed is the 8-byte little-endian length followed by the bytes.
  Sha256 c;
  c.UpdateFramed("xyz");
  EXPECT_EQ(DigestToHex(c.Finish()), Sha256Hex(std::string("\x03\0\0\0\0\0\0\0xyz", 11)));
}

}  // namespace
}  // namespace baton
