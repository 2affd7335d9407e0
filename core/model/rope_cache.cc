#include "core/model/rope_cache.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

namespace baton {

RopeTableCache::Tables RopeTableCache::Get(const std::string& key, const std::function<Tables()>& compute) {
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [k, tables] : entries_) {
      if (k == key) return tables;
    }
  }
  // Computed outside the lock (kernels); two threads missing the same key both compute it, and the first one kept.
  Tables tables = compute();
  absl::MutexLock lock(&mu_);
  ++computed_;
  for (const auto& [k, held] : entries_) {
    if (k == key) return held;
  }
  entries_.emplace_back(key, tables);
  while (entries_.size() > capacity_) entries_.pop_front();
  return tables;
}

int64_t RopeTableCache::computed() const {
  absl::MutexLock lock(&mu_);
  return computed_;
}

std::string PositionIdsKey(const at::Tensor& img_ids, const at::Tensor& txt_ids) {
  std::string key;
  for (const at::Tensor& ids : {img_ids, txt_ids}) {
    const at::Tensor host = ids.to(at::kCPU, at::kLong).contiguous();
    absl::StrAppend(&key, "[", absl::StrJoin(host.sizes(), "x"), "]");
    key.append(static_cast<const char*>(host.data_ptr()), host.numel() * host.element_size());
  }
  return key;
}

}  // namespace baton
