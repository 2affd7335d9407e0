#include "core/model/checkpointed_pieces.h"

#include <utility>

#include "core/model/checkpoint_chain.h"

namespace baton {
namespace {

std::vector<at::Tensor> Live(const TensorMap& m) {
  std::vector<at::Tensor> out;
  for (const auto& [name, t] : m) {
    if (t.defined()) out.push_back(t);
  }
  return out;
}

// Detached copies; floating ones require grad so the recomputed piece reports gradients for them.
TensorMap DetachedLeaves(const TensorMap& m) {
  TensorMap out;
  for (const auto& [name, t] : m) {
    out[name] = t.defined() ? t.detach().requires_grad_(t.is_floating_point()) : t;
  }
  return out;
}

}  // namespace

TensorMap RunPieces(const std::vector<StagePiece>& pieces, const TensorMap& in) {
  TensorMap a = in;
  for (const auto& piece : pieces) a = piece(a);
  return a;
}

size_t CheckpointedPieceCount(int64_t recompute_blocks, size_t lead, size_t blocks, size_t pieces) {
  if (recompute_blocks < 0 || recompute_blocks >= static_cast<int64_t>(blocks)) return pieces;
  if (recompute_blocks == 0) return 0;
  return lead + static_cast<size_t>(recompute_blocks);
}

TensorMap ForwardPiecesCheckpointed(const std::vector<StagePiece>& pieces, size_t c, const TensorMap& in,
                                    std::vector<TensorMap>* checkpoints) {
  return ForwardChainCheckpointed(pieces, c, in, checkpoints, DetachedLeaves);
}

void BackwardPiecesFromCheckpoints(const std::vector<StagePiece>& pieces, size_t c, std::vector<TensorMap> checkpoints,
                                   const StageModel::BackwardSeed& seed) {
  BackwardChainFromCheckpoints(pieces, c, std::move(checkpoints), seed, Live);
}

}  // namespace baton
