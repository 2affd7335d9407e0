// Test helpers: a tiny Wan config (2 heads x 12, 4 latent channels, text 16, FFN 32), so Wan model tests run in
// milliseconds on the CPU.
#pragma once

#include <cstdint>

#include "core/model/wan_config.h"

namespace baton::test_util {

WanConfig TinyWanConfig(int64_t layers = 3);

}  // namespace baton::test_util
