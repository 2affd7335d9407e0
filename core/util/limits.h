// Sizes that processes which share no other code must agree on.
#pragma once

#include <cstddef>

namespace baton {

// A job file: the job reader and the job service refuse a bigger one, and `baton submit` reads no more (naming the
// file rather than letting gRPC refuse its size). A real job file is 1-5 KiB; 256 KiB leaves room for 60 prompts of
// 4 KiB.
inline constexpr size_t kMaxJobFileBytes = 256 << 10;

}  // namespace baton
