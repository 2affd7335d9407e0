// Each owner's own peak over a counter that resets only as a whole: the CUDA caching allocator keeps one peak per
// device, so two pipelines on one stage worker (a sweep, a shared worker) resetting it after each of their steps
// cut each other's periods short. Every take folds the counter's peak into every owner's open period, then the
// counter is reset (by the caller) and the taker's next period starts at the counter's current value.
#pragma once

#include <cstdint>
#include <map>

namespace baton {

class PeakPeriods {
 public:
  // `peak`: the counter's peak since it was last reset (the caller resets it after this call); `current`: its value
  // now. Returns `owner`'s peak since its last take (`peak` on its first).
  int64_t Take(uint64_t owner, int64_t peak, int64_t current);
  void Forget(uint64_t owner);

 private:
  std::map<uint64_t, int64_t> open_;  // owner -> the highest value seen in its open period
};

}  // namespace baton
