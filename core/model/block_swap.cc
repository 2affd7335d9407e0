#include "core/model/block_swap.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <string>
#include <utility>

#include "core/lora/lora_linear.h"
#include "core/model/model_family.h"

namespace baton {

BlockSwap::BlockSwap(std::vector<torch::nn::Module*> blocks, std::shared_ptr<DeviceTransfer> transfer)
    : transfer_(std::move(transfer)) {
  absl::MutexLock lock(&mu_);
  for (torch::nn::Module* block : blocks) {
    Unit unit;
    auto take = [&](const std::string& name, const at::Tensor& t) {
      if (!t.defined() || t.requires_grad() || IsLoraParameterName(name)) return;
      unit.device.push_back(t);
      // The master: page-locked for the upload stream on CUDA; on the CPU the tensor's own storage (a new handle,
      // which keeps it when the module's tensor is emptied).
      unit.host.push_back(t.is_cuda() ? at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true)).copy_(t)
                                      : t.detach());
      host_bytes_ += static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
    };
    for (const auto& p : block->named_parameters(/*recurse=*/true)) take(p.key(), p.value());
    for (const auto& b : block->named_buffers(/*recurse=*/true)) take(b.key(), b.value());
    unit.resident = true;
    ++resident_;
    Drop(unit);
    units_.push_back(std::move(unit));
  }
  blocks_ = units_.size();
}

void BlockSwap::CopyIn(Unit& unit) {
  for (size_t k = 0; k < unit.device.size(); ++k) {
    const at::Tensor& host = unit.host[k];
    unit.device[k].set_data(transfer_ != nullptr && transfer_->device().is_cuda() ? transfer_->Upload(host)
                                                                                  : host.clone());
  }
  unit.resident = true;
  peak_resident_ = std::max(peak_resident_, ++resident_);
}

void BlockSwap::Drop(Unit& unit) {
  for (at::Tensor& t : unit.device) t.set_data(at::empty({0}, t.options()));
  unit.resident = false;
  --resident_;
}

void BlockSwap::Enter(size_t b) {
  absl::MutexLock lock(&mu_);
  TORCH_CHECK(b < units_.size(), "block swap: block ", b, " of ", units_.size());
  if (!units_[b].resident) CopyIn(units_[b]);
  for (size_t i = 0; i < units_.size(); ++i) {
    if (i != b && units_[i].resident) Drop(units_[i]);
  }
  entered_before_ = last_entered_;
  last_entered_ = static_cast<int64_t>(b);
}

void BlockSwap::Leave(size_t b) {
  absl::MutexLock lock(&mu_);
  const int64_t next =
      entered_before_ > static_cast<int64_t>(b) ? static_cast<int64_t>(b) - 1 : static_cast<int64_t>(b) + 1;
  if (next >= 0 && next < static_cast<int64_t>(units_.size()) && !units_[static_cast<size_t>(next)].resident) {
    CopyIn(units_[static_cast<size_t>(next)]);
  }
}

int BlockSwap::resident() const {
  absl::MutexLock lock(&mu_);
  return resident_;
}

int BlockSwap::peak_resident() const {
  absl::MutexLock lock(&mu_);
  return peak_resident_;
}

void CheckSwappedBlocksRecomputed(const BlockSwap* swap, int64_t recompute_blocks, int64_t blocks) {
  if (swap == nullptr || recompute_blocks < 0 || recompute_blocks >= blocks) return;  // kAllBlocks: every block
  TORCH_CHECK(recompute_blocks >= static_cast<int64_t>(swap->blocks()), "this stage swaps its first ", swap->blocks(),
              " blocks (offload): they must be recomputed, but only ", recompute_blocks, " are");
}

void CheckNoGraphThroughSwappedBlocks(const BlockSwap* swap) {
  TORCH_CHECK(swap == nullptr || !at::GradMode::is_enabled(),
              "this stage swaps blocks (offload): it trains only with those blocks recomputed");
}

absl::StatusOr<std::shared_ptr<const BlockSwap>> SwapFirstBlocks(StageModel& stage, int64_t blocks,
                                                                 std::shared_ptr<DeviceTransfer> transfer) {
  std::vector<torch::nn::Module*> modules = stage.BlockModules();
  if (blocks < 0 || blocks > static_cast<int64_t>(modules.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("offload: ", blocks, " blocks, but the stage holds ", modules.size()));
  }
  if (blocks == 0) return std::shared_ptr<const BlockSwap>();
  modules.resize(static_cast<size_t>(blocks));
  auto swap = std::make_shared<BlockSwap>(std::move(modules), std::move(transfer));
  stage.UseBlockSwap(swap);
  return std::shared_ptr<const BlockSwap>(swap);
}

}  // namespace baton
