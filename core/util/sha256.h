// SHA-256 (FIPS 180-4), streaming and one-shot. Used for content hashes of dataset samples and
// cache records, where a change in any input byte must change the key. Not constant-time; do not
// use it for secrets.
#pragma once

#include <absl/strings/string_view.h>

#include <array>
#include <cstdint>
#include <string>

namespace baton {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();

  // Appends bytes to the message. May be called any number of times before Finish().
  void Update(absl::string_view data);
  void Update(const void* data, size_t size);
  // Appends a 64-bit little-endian length followed by the bytes: unambiguous framing when several
  // fields are hashed together ("ab"+"c" and "a"+"bc" differ).
  void UpdateFramed(absl::string_view data);
  // UpdateFramed's length alone, for bytes that then arrive in pieces (Update): `n` must be their total.
  void UpdateFrameLength(uint64_t n);

  // Pads, returns the digest and resets the object for a new message.
  Digest Finish();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Lower-case hex of a digest (64 characters).
std::string DigestToHex(const Sha256::Digest& digest);

// One-shot helpers.
Sha256::Digest Sha256Digest(absl::string_view data);
std::string Sha256Hex(absl::string_view data);

}  // namespace baton
