// Elapsed wall time on the monotonic clock, the one every duration Baton reports is measured with.
#pragma once

#include <chrono>

namespace baton {

// Seconds from `start` (a std::chrono::steady_clock reading) to now.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace baton
