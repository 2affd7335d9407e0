// The one way a training step reads values back from its device (losses, gradient norms): a synchronizing copy to
// the host on a GPU, counted, so a test can pin how many a step makes (core/train/local_step.h promises one).
// Everything else a step computes stays where it lives.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace baton {

// `t` on the host (CPU, contiguous). A meta tensor holds no values: it reads back as zeros of its shape and dtype (the
// placement tests run whole steps on meta, where any other readback throws).
at::Tensor ReadBack(const at::Tensor& t);
// How many ReadBack calls this process has made (all threads).
int64_t ReadBackCount();

}  // namespace baton
