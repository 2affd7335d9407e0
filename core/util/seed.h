// Seeds from seeds and names: every random draw in Baton (weights, LoRA init, dropout masks, the sampler's
// order, synthetic data) is seeded through these two, so a run is a pure function of its job's seed.
#pragma once

#include <cstdint>
#include <string>

namespace baton {

// Mixes two 64-bit values into a well-spread seed (splitmix64 finalizer).
uint64_t MixSeed(uint64_t a, uint64_t b);
// Stable 64-bit FNV-1a hash of a string (names → seeds; must not change between releases).
uint64_t HashName(const std::string& s);

}  // namespace baton
