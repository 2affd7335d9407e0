#include "core/sample/expert_denoiser.h"

#include <cmath>

namespace baton {
namespace {

// WanPipeline compares the scheduler's integer timestep with boundary_ratio · num_train_timesteps; NoisyBatch carries
// it divided by 1000.
bool IsHighNoise(const NoisyBatch& batch, double boundary_ratio) {
  const double t = std::round(batch.timestep.reshape({-1})[0].item<double>() * 1000.0);
  return t >= boundary_ratio * 1000.0;
}

}  // namespace

Denoiser ExpertDenoiser(const Denoiser& high, const Denoiser& low, double boundary_ratio) {
  return
      [high, low, boundary_ratio](const std::vector<NoisyBatch>& batches) -> absl::StatusOr<std::vector<at::Tensor>> {
        std::vector<NoisyBatch> sides[2];
        std::vector<std::pair<int, size_t>> where;  // (side, index within it) of each batch
        for (const NoisyBatch& b : batches) {
          const int side = IsHighNoise(b, boundary_ratio) ? 0 : 1;
          where.emplace_back(side, sides[side].size());
          sides[side].push_back(b);
        }
        std::vector<at::Tensor> outs[2];
        for (int side = 0; side < 2; ++side) {
          if (sides[side].empty()) continue;
          auto out = (side == 0 ? high : low)(sides[side]);
          if (!out.ok()) return out.status();
          outs[side] = std::move(*out);
        }
        std::vector<at::Tensor> result;
        for (const auto& [side, index] : where) result.push_back(outs[side][index]);
        return result;
      };
}

}  // namespace baton
