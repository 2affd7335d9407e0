// Activation checkpointing over a stage written as a chain of pieces TensorMap -> TensorMap (the family-neutral
// form of Flux2StageImpl::ForwardCheckpointed / BackwardFromCheckpoints; semantics documented on StageModel in
// model_family.h). The first `checkpointed` pieces run without a graph, keeping each one's input; the rest run with
// their graph from a leaf. Backward recomputes the checkpointed pieces one at a time from the last, so gradients
// are bitwise those of running every piece with its graph.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "core/model/model_family.h"

namespace baton {

using StagePiece = std::function<TensorMap(const TensorMap&)>;

TensorMap RunPieces(const std::vector<StagePiece>& pieces, const TensorMap& in);

// How many leading pieces a hybrid with `recompute_blocks` checkpoints: `lead` pieces come before the blocks
// (embedders), then `blocks` block pieces, then the rest (head).
size_t CheckpointedPieceCount(int64_t recompute_blocks, size_t lead, size_t blocks, size_t pieces);

TensorMap ForwardPiecesCheckpointed(const std::vector<StagePiece>& pieces, size_t checkpointed, const TensorMap& in,
                                    std::vector<TensorMap>* checkpoints);
void BackwardPiecesFromCheckpoints(const std::vector<StagePiece>& pieces, size_t checkpointed,
                                   std::vector<TensorMap> checkpoints, const StageModel::BackwardSeed& seed);

}  // namespace baton
