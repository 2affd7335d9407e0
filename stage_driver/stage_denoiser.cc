#include "stage_driver/stage_denoiser.h"

#include <algorithm>

#include "core/util/status.h"

namespace baton {

StageDenoiser::StageDenoiser(const ModelFamily& model, ShellModel& shell, at::ScalarType dtype, int micro_batches,
                             StagePipeline& pipeline, const std::map<std::string, at::Tensor>& master)
    : model_(model),
      shell_(shell),
      dtype_(dtype),
      micro_batches_(micro_batches),
      pipeline_(&pipeline),
      master_(master) {}

Denoiser StageDenoiser::AsDenoiser() { return With(master_); }

Denoiser StageDenoiser::With(const std::map<std::string, at::Tensor>& adapters) {
  return [this, &adapters](const std::vector<NoisyBatch>& batches) { return Run(batches, adapters); };
}

absl::StatusOr<std::vector<at::Tensor>> StageDenoiser::Run(const std::vector<NoisyBatch>& batches,
                                                           const std::map<std::string, at::Tensor>& adapters) {
  const size_t per_pass = static_cast<size_t>(std::max(micro_batches_, 1));
  std::vector<at::Tensor> outputs;
  for (size_t begin = 0; begin < batches.size(); begin += per_pass) {
    const size_t end = std::min(batches.size(), begin + per_pass);
    std::vector<ShellOutputs> shell;
    for (size_t i = begin; i < end; ++i) {
      ASSIGN_OR_RETURN(TensorMap inputs, model_.MicroBatchInputs(batches[i]));
      ASSIGN_OR_RETURN(ShellOutputs out, shell_.Run(inputs, dtype_));
      shell.push_back(std::move(out));
    }
    ASSIGN_OR_RETURN(std::vector<at::Tensor> pass, pipeline_->RunForwardPass(step_, next_pass_++, shell, adapters));
    for (at::Tensor& t : pass) outputs.push_back(t.to(at::kFloat));
  }
  return outputs;
}

}  // namespace baton
