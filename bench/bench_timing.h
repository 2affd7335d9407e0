// Timing helpers the benches share: the median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace baton {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median seconds of `reps` calls of f().
template <typename F>
double MedianSeconds(int reps, F&& f) {
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return Median(s);
}

}  // namespace baton
