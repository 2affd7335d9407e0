// CRC32C (Castagnoli), the checksum of a cache record's tensor bytes (core/data/cache.h). A CRC rather than a
// hash because what it guards against is corruption, not an adversary: every 1- to 3-bit error and every burst of
// up to 32 bits is caught for sure. x86-64 with SSE4.2 uses the crc32 instruction (~10 GB/s); elsewhere a
// slicing-by-8 table (~2 GB/s). No dependency: Debian's Abseil (20220623) predates absl/crc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace baton {

// Extends `crc` (0 to start) over `n` bytes: Crc32c(Crc32c(0, a), b) == Crc32c(0, a ‖ b).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);
// The table version, whatever the CPU (tests hold the two to each other).
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);

}  // namespace baton
