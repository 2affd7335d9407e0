#include "core/vae/wan_vae_cache_ops.h"

#include <algorithm>
#include <memory>

namespace baton {

WanCausalConv3d WanCausalConv(int64_t in, int64_t out, std::array<int64_t, 3> kernel, std::array<int64_t, 3> stride,
                              std::array<int64_t, 3> padding) {
  return WanCausalConv3d(std::make_shared<WanCausalConv3dImpl>(in, out, kernel, stride, padding));
}

WanConvParams::WanConvParams(const std::vector<int64_t>& shape) {
  weight = register_parameter("weight", at::zeros(shape));
  bias = register_parameter("bias", at::zeros({shape[0]}));
}

at::Tensor WanNextCache(const at::Tensor& x, const at::Tensor& slot) {
  const int64_t t = x.size(2);
  at::Tensor cache_x = x.narrow(2, std::max<int64_t>(0, t - kWanCacheT), std::min(t, kWanCacheT)).clone();
  if (cache_x.size(2) < 2 && slot.defined()) cache_x = at::cat({slot.narrow(2, slot.size(2) - 1, 1), cache_x}, 2);
  return cache_x;
}

at::Tensor WanCachedConv(WanCausalConv3d& conv, const at::Tensor& x, WanFeatCache* cache) {
  if (cache == nullptr) return conv->forward(x);
  at::Tensor& slot = cache->Current();
  at::Tensor cache_x = WanNextCache(x, slot);
  at::Tensor out = conv->forward(x, slot);
  slot = cache_x;
  ++cache->idx;
  return out;
}

at::Tensor WanFramesToBatch(const at::Tensor& x) {
  return x.permute({0, 2, 1, 3, 4}).reshape({x.size(0) * x.size(2), x.size(1), x.size(3), x.size(4)});
}

at::Tensor WanBatchToFrames(const at::Tensor& x, int64_t b, int64_t t) {
  return x.view({b, t, x.size(1), x.size(2), x.size(3)}).permute({0, 2, 1, 3, 4});
}

}  // namespace baton
