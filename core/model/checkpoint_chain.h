// Activation checkpointing over a stage written as a chain of pieces A -> A, for any activation type A (the
// family-neutral TensorMap of checkpointed_pieces.h, Flux2Activations). One implementation of the loop both use;
// semantics as Flux2StageImpl::ForwardCheckpointed / BackwardFromCheckpoints document them.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <functional>
#include <tuple>
#include <utility>
#include <vector>

namespace baton {

// The first `c` pieces run without a graph, each one's input kept in `checkpoints` (the first is `in` itself). If
// pieces remain, they run with their graph from a leaf (`detached_leaves` of the last checkpointed output, unless
// c == 0), and `checkpoints` ends with that leaf and the tail's output. `detached_leaves(a)`: `a` with every live
// tensor detached, floating ones requiring grad.
template <typename A, typename DetachFn>
A ForwardChainCheckpointed(const std::vector<std::function<A(const A&)>>& pieces, size_t c, const A& in,
                           std::vector<A>* checkpoints, const DetachFn& detached_leaves) {
  checkpoints->clear();
  A a = in;
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < c; ++i) {
      checkpoints->push_back(i == 0 ? in : detached_leaves(a));
      a = pieces[i](a);
    }
  }
  if (c == pieces.size()) return a;
  // The graph tail: its input is a leaf (unless nothing before it is checkpointed) whose .grad seeds the
  // recompute of the checkpointed pieces in BackwardChainFromCheckpoints.
  at::AutoGradMode grad_mode(true);
  if (c > 0) a = detached_leaves(a);
  checkpoints->push_back(a);
  for (size_t i = c; i < pieces.size(); ++i) a = pieces[i](a);
  checkpoints->push_back(a);
  return a;
}

// Backward from ForwardChainCheckpointed's `checkpoints` (same pieces, same `c`): the graph tail first, then each
// checkpointed piece recomputed with a graph from the last back, dropping each checkpoint once used. `seed`
// receives the stage output and returns the tensors to start backward from and their gradients; `live(a)`: the
// defined tensors of `a` in a fixed order.
template <typename A, typename SeedFn, typename LiveFn>
void BackwardChainFromCheckpoints(const std::vector<std::function<A(const A&)>>& pieces, size_t c,
                                  std::vector<A> checkpoints, const SeedFn& seed, const LiveFn& live) {
  const size_t expected = c == pieces.size() ? c : c + 2;
  TORCH_CHECK(checkpoints.size() == expected, "BackwardFromCheckpoints: ", checkpoints.size(), " checkpoints for ",
              pieces.size(), " pieces, ", c, " of them checkpointed");
  at::AutoGradMode grad_mode(true);
  std::vector<at::Tensor> next_inputs;  // piece i+1's recomputed inputs, whose .grad seeds piece i
  if (c < pieces.size()) {
    // The graph tail first: its output's graph reaches back to the tail's leaf input.
    auto [roots, grads] = seed(checkpoints.back());
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    next_inputs = live(checkpoints[c]);
    checkpoints.resize(c);
  }
  for (size_t i = c; i-- > 0;) {
    const A out = pieces[i](checkpoints[i]);
    std::vector<at::Tensor> roots, grads;
    if (i + 1 == pieces.size()) {
      std::tie(roots, grads) = seed(out);
    } else {
      const std::vector<at::Tensor> out_live = live(out);
      TORCH_CHECK(out_live.size() == next_inputs.size(), "per-block recompute: piece ", i, " output arity changed");
      for (size_t j = 0; j < out_live.size(); ++j) {
        if (out_live[j].requires_grad() && next_inputs[j].grad().defined()) {
          roots.push_back(out_live[j]);
          grads.push_back(next_inputs[j].grad());
        }
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    next_inputs = live(checkpoints[i]);
    checkpoints[i] = A();  // used; free it
  }
}

}  // namespace baton
