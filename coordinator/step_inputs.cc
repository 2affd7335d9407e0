#include "coordinator/step_inputs.h"

#include "core/util/status.h"

namespace baton {

absl::StatusOr<StepInputs> PrepareStepInputs(JobSetup& setup, int64_t step) {
  const int m = setup.micro_batches;
  StepInputs in;
  ASSIGN_OR_RETURN(in.micro_batches, setup.sampler->Step(step));
  in.shell.resize(m);
  for (int i = 0; i < m; ++i) {
    ASSIGN_OR_RETURN(in.shell[i], setup.shell->Run(in.micro_batches[i].model_inputs, setup.dtype));
  }
  return in;
}

}  // namespace baton
