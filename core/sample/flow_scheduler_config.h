// A diffusers scheduler_config.json for flow-matching sampling, read with diffusers' field names and defaults:
// UniPCMultistepScheduler with use_flow_sigmas + flow_prediction (what Wan pipeline folders ship) or
// FlowMatchEulerDiscreteScheduler. Options Baton does not implement are refused by name and value, never ignored;
// options that cannot change a flow-sigma schedule (the VP beta table, timestep_spacing) are read and checked only.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace baton {

enum class FlowSchedulerClass {
  kUniPCMultistep,         // "UniPCMultistepScheduler"
  kFlowMatchEulerDiscrete  // "FlowMatchEulerDiscreteScheduler"
};

enum class UniPCSolverType { kBh1, kBh2 };        // solver_type; "midpoint"/"heun"/"logrho" read as bh2
enum class FinalSigmasType { kZero, kSigmaMin };  // final_sigmas_type (UniPC; FlowMatchEuler always ends at 0)

struct FlowSchedulerConfig {
  FlowSchedulerClass scheduler_class = FlowSchedulerClass::kUniPCMultistep;  // `_class_name`
  int64_t num_train_timesteps = 1000;
  // k in σ = k·s / (1 + (k − 1)·s): UniPC's `flow_shift`, FlowMatchEuler's `shift` (default 1.0 in both).
  double shift = 1.0;
  // Stretch the shifted σ so the last one equals this (diffusers' stretch_shift_to_terminal); null or 0 = off.
  std::optional<double> shift_terminal;

  // UniPCMultistepScheduler only (prediction_type flow_prediction, use_flow_sigmas, predict_x0 are required).
  int64_t solver_order = 2;
  UniPCSolverType solver_type = UniPCSolverType::kBh2;
  bool lower_order_final = true;
  FinalSigmasType final_sigmas_type = FinalSigmasType::kZero;
  std::vector<int64_t> disable_corrector;  // step indices whose *following* step skips the corrector

  std::string ClassName() const;  // the diffusers class name
};

// Parses a scheduler_config.json object; `source` prefixes every error (e.g. the file path). A `_class_name`
// other than the two above, an unknown field (keys starting with '_' are metadata and skipped), a value of the
// wrong type or an unsupported value ("solver_type": "bh3", "thresholding": true, "use_karras_sigmas": true,
// "prediction_type": "epsilon" — which is also what a missing prediction_type means) is INVALID_ARGUMENT naming
// the field and the value. Without `_class_name` the fields decide: flow_shift → UniPC, shift → FlowMatchEuler.
absl::StatusOr<FlowSchedulerConfig> ParseFlowSchedulerConfig(const nlohmann::json& j, const std::string& source);

// The UniPC configs whose last step to σ = 0 diffusers computes as inf/NaN, refused (INVALID_ARGUMENT; the parser
// calls it): solver_order ≥ 2 without lower_order_final (λ = ln(α/σ) is infinite there, and an order-2 step divides
// by it) and solver_type bh1 (B(h) = h is infinite). Both work with final_sigmas_type sigma_min.
absl::Status CheckFinalStep(const FlowSchedulerConfig& config, const std::string& source);

// Reads `path`: a scheduler_config.json file, a scheduler/ folder holding one, or a pipeline folder whose
// scheduler/ holds one. NOT_FOUND names the paths tried.
absl::StatusOr<FlowSchedulerConfig> LoadFlowSchedulerConfig(const std::string& path);

// FlowMatchEulerDiscreteScheduler(num_train_timesteps, shift, shift_terminal) of a UniPC config: the Euler
// alternative on a Wan folder (what diffusers' docs swap in), same k.
FlowSchedulerConfig EulerAlternative(const FlowSchedulerConfig& config);

}  // namespace baton
