#include "coordinator/step_inputs.h"

#include "core/pipeline/stage_io.h"
#include "core/train/common.h"
#include "core/util/status.h"

namespace baton {

absl::StatusOr<StepInputs> PrepareStepInputs(JobSetup& setup, int64_t step) {
  const int m = setup.micro_batches;
  StepInputs in;
  ASSIGN_OR_RETURN(in.micro_batches, setup.sampler->Step(step));
  in.constants.resize(m);
  in.rope_keys.resize(m);
  RETURN_IF_ERROR(TorchCall("computing the shell", [&] {
    at::NoGradGuard no_grad;
    for (int i = 0; i < m; ++i) {
      const MicroBatch& mb = in.micro_batches[i];
      in.constants[i] = setup.shell(mb.timestep, mb.guidance, mb.img_ids, mb.txt_ids, setup.dtype);
      in.rope_keys[i] = RopeKey(mb.grid_h, mb.grid_w, mb.encoder_hidden_states.size(1));
    }
  }));
  return in;
}

}  // namespace baton
