#include "core/model/checkpointed_pieces.h"

#include <torch/csrc/autograd/autograd.h>

#include <tuple>

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
  checkpoints->clear();
  TensorMap a = in;
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < c; ++i) {
      checkpoints->push_back(i == 0 ? in : DetachedLeaves(a));
      a = pieces[i](a);
    }
  }
  if (c == pieces.size()) return a;
  // The graph tail: its input is a leaf (unless nothing before it is checkpointed) whose .grad seeds the
  // recompute of the checkpointed pieces.
  at::AutoGradMode grad_mode(true);
  if (c > 0) a = DetachedLeaves(a);
  checkpoints->push_back(a);
  for (size_t i = c; i < pieces.size(); ++i) a = pieces[i](a);
  checkpoints->push_back(a);
  return a;
}

void BackwardPiecesFromCheckpoints(const std::vector<StagePiece>& pieces, size_t c, std::vector<TensorMap> checkpoints,
                                   const StageModel::BackwardSeed& seed) {
  const size_t expected = c == pieces.size() ? c : c + 2;
  TORCH_CHECK(checkpoints.size() == expected, "BackwardFromCheckpoints: ", checkpoints.size(), " checkpoints for ",
              pieces.size(), " pieces, ", c, " of them checkpointed");
  at::AutoGradMode grad_mode(true);
  std::vector<at::Tensor> next_inputs;  // piece i+1's recomputed inputs, whose .grad seeds piece i
  if (c < pieces.size()) {
    auto [roots, grads] = seed(checkpoints.back());
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    next_inputs = Live(checkpoints[c]);
    checkpoints.resize(c);
  }
  for (size_t i = c; i-- > 0;) {
    const TensorMap out = pieces[i](checkpoints[i]);
    std::vector<at::Tensor> roots, grads;
    if (i + 1 == pieces.size()) {
      std::tie(roots, grads) = seed(out);
    } else {
      const std::vector<at::Tensor> live = Live(out);
      TORCH_CHECK(live.size() == next_inputs.size(), "per-block recompute: piece ", i, " output arity changed");
      for (size_t j = 0; j < live.size(); ++j) {
        if (live[j].requires_grad() && next_inputs[j].grad().defined()) {
          roots.push_back(live[j]);
          grads.push_back(next_inputs[j].grad());
        }
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    next_inputs = Live(checkpoints[i]);
    checkpoints[i] = TensorMap();  // used; free it
  }
}

}  // namespace baton
