// RoPE tables computed once per key on a shell's device. A shell used to rebuild them for every micro-batch:
// uploading the position ids (a synchronizing copy on a GPU) and a dozen small kernels, for tables that depend
// only on the resolution bucket and the text length. The last few keys stay cached (buckets come in turns).
#pragma once

#include <ATen/ATen.h>
#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>

namespace baton {

class RopeTableCache {
 public:
  using Tables = std::pair<at::Tensor, at::Tensor>;  // (cos, sin)
  explicit RopeTableCache(size_t capacity = 8) : capacity_(capacity) {}

  // The tables of `key` (the exact identity of the positions: a grid's shape or the ids' bytes), computed by
  // `compute` when absent; the oldest key leaves once `capacity` are held. The tables are shared: read only.
  Tables Get(const std::string& key, const std::function<Tables()>& compute);
  // How many times `compute` ran (tests).
  int64_t computed() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<std::pair<std::string, Tables>> entries_ ABSL_GUARDED_BY(mu_);  // oldest first
  int64_t computed_ ABSL_GUARDED_BY(mu_) = 0;
};

// The exact key of arbitrary position ids (any dtype, any device): their shape and bytes.
std::string PositionIdsKey(const at::Tensor& img_ids, const at::Tensor& txt_ids);

}  // namespace baton
