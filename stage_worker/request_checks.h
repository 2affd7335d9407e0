// Request validation for the stage worker: pure functions (no gRPC, no model) that decide whether a Push, a
// RunStep plan or a GetLora call belongs to the job this worker is configured for and carries what this stage
// expects. The service runs them before anything is stored or computed, so nothing a peer sends can poison or
// exhaust the running job (issue 10). A fuzz target drives CheckEnvelope directly.
#pragma once

#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/strings/string_view.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "baton/v1/stage.pb.h"
#include "core/model/model_family.h"
#include "wire/envelope.h"

namespace baton {

// What the configured job lets in. Filled at Configure (ExpectedStageIOFor), read by every RPC.
struct ExpectedStageIO {
  std::string job_id;
  std::string config_hash;
  int32_t micro_batches = 1;                 // micro-batch ids in [0, micro_batches)
  int32_t num_chunks = 1;                    // chunk ids in [0, num_chunks)
  bool takes_inputs = false;                 // some chunk holds the embedders (INPUTS from the coordinator)
  bool takes_target = false;                 // some chunk holds the head (TARGET from the coordinator)
  bool takes_activation = false;             // some chunk has a previous virtual stage
  bool takes_gradient = false;               // some chunk has a next virtual stage
  std::shared_ptr<const ModelFamily> model;  // the configured model: checks the tensors (ModelFamily::CheckWire)
  at::ScalarType dtype = at::kFloat;         // activations arrive in the compute dtype
  std::map<std::string, std::vector<int64_t>> lora_shapes;  // LORA_WEIGHTS: exactly these names and shapes
  // The step this worker last ran or runs (-1 before its first): pushes and plans are accepted for steps in
  // [current_step, current_step + kStepWindow] -- the coordinator pushes step n+1 while step n runs and may redo
  // step n after losing a worker -- and refused (OUT_OF_RANGE) otherwise.
  int64_t current_step = -1;
  static constexpr int64_t kStepWindow = 2;
};

// FAILED_PRECONDITION naming both jobs unless (job_id, config_hash) is the configured job.
absl::Status CheckJob(const ExpectedStageIO& expected, const std::string& job_id, const std::string& config_hash,
                      absl::string_view what);
// The same for the coordinator's per-step calls (plans, Reduce, Update), whose config hash is optional: empty, the job
// id alone names the configuration (it is the job's hash), which keeps a step's control traffic small.
absl::Status CheckStepJob(const ExpectedStageIO& expected, const std::string& job_id, const std::string& config_hash,
                          absl::string_view what);
// INVALID_ARGUMENT for a negative step; OUT_OF_RANGE for one outside the window (any step ≥ 0 before the first step):
// the window moves, so the same push may be stale or early, never malformed.
absl::Status CheckStepWindow(const ExpectedStageIO& expected, int64_t step, absl::string_view what);
// Job, step window, kind (one this stage receives at all), micro-batch and chunk ranges (INVALID_ARGUMENT). Run on
// the header alone, before the tensors are read.
absl::Status CheckEnvelopeHeader(const ExpectedStageIO& expected, const v1::EnvelopeHeader& header);
// The tensors against the kind: names, ranks, dtypes and every size knowable without the micro-batch's other
// bundles; TARGET and LORA_WEIGHTS must be finite. INVALID_ARGUMENT naming expected vs got.
absl::Status CheckEnvelopeTensors(const ExpectedStageIO& expected, const v1::EnvelopeHeader& header,
                                  const std::map<std::string, at::Tensor>& tensors);
// Both of the above: the whole decision whether a received envelope may enter the inbox.
absl::Status CheckEnvelope(const ExpectedStageIO& expected, const ReceivedEnvelope& envelope);
// Job, step window, micro_batches equal to the configured count, every action's micro-batch and chunk in range.
absl::Status CheckStepPlan(const ExpectedStageIO& expected, const v1::StepPlan& plan);
// LoadState's envelope (kind LORA_STATE): every adapter of this stage (as LORA_WEIGHTS), any of their
// "<name>.exp_avg" / "<name>.exp_avg_sq" moments (finite, the adapter's shape), and "__step__" (one integer ≥ 0).
absl::Status CheckLoraState(const ExpectedStageIO& expected, const std::map<std::string, at::Tensor>& tensors);
// INVALID_ARGUMENT "<what> has shape [..], expected [..]" unless `got` has exactly the `expected` sizes.
absl::Status CheckExactShape(absl::string_view what, at::IntArrayRef expected, const at::Tensor& got);

}  // namespace baton
