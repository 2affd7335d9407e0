// `baton step-grads`: one training step's forward and backward passes exactly as `baton train-local` runs them,
// without the optimizer, written to a safetensors file so the referees (tests/upstream/test_wan_i2v.py) can recompute
// the loss and the LoRA gradients with diffusers + peft on the same cache records, noise and timesteps.
#pragma once

#include "client/commands.h"

namespace baton {

Command StepGradsCommand();

}  // namespace baton
