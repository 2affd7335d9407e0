#include "core/sample/flow_scheduler_config.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <cmath>
#include <functional>
#include <map>

#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Json = nlohmann::json;

constexpr const char* kUniPC = "UniPCMultistepScheduler";
constexpr const char* kEuler = "FlowMatchEulerDiscreteScheduler";

class FieldReader {
 public:
  FieldReader(const std::string& source, const std::string& key, const Json& value)
      : source_(source), key_(key), value_(value) {}

  absl::Status Error(const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", key_, "' = ", value_.dump(), ": ", why));
  }
  absl::StatusOr<bool> Bool() const {
    if (!value_.is_boolean()) return Error("expected true or false");
    return value_.get<bool>();
  }
  absl::StatusOr<double> Number() const {
    if (!value_.is_number()) return Error("expected a number");
    return value_.get<double>();
  }
  absl::StatusOr<int64_t> Int() const {
    if (value_.is_number_integer()) return value_.get<int64_t>();
    if (value_.is_number_float()) {
      const double v = value_.get<double>();
      if (std::floor(v) == v && std::fabs(v) < 9e15) return static_cast<int64_t>(v);
    }
    return Error("expected an integer");
  }
  absl::StatusOr<std::string> String() const {
    if (!value_.is_string()) return Error("expected a string");
    return value_.get<std::string>();
  }
  // A field Baton reads only to check it has the shape diffusers accepts (it cannot change a flow schedule).
  absl::Status NumberOrNull() const {
    if (!value_.is_null() && !value_.is_number()) return Error("expected a number or null");
    return absl::OkStatus();
  }
  absl::Status MustBe(bool want) const {
    ASSIGN_OR_RETURN(bool v, Bool());
    if (v != want) {
      return Error(absl::StrCat("Baton implements only ", want ? "true" : "false",
                                " (the flow-matching sampling Wan pipelines ship)"));
    }
    return absl::OkStatus();
  }
  absl::Status OneOf(const std::vector<std::string>& allowed) const {
    ASSIGN_OR_RETURN(std::string v, String());
    for (const std::string& a : allowed) {
      if (v == a) return absl::OkStatus();
    }
    return Error(absl::StrCat("expected one of ", absl::StrJoin(allowed, ", ")));
  }
  const Json& value() const { return value_; }

 private:
  const std::string& source_;
  const std::string& key_;
  const Json& value_;
};

using Handler = std::function<absl::Status(const FieldReader&, FlowSchedulerConfig*)>;

// Fields both classes share.
void AddCommonFields(std::map<std::string, Handler>* h) {
  (*h)["num_train_timesteps"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    ASSIGN_OR_RETURN(c->num_train_timesteps, f.Int());
    if (c->num_train_timesteps <= 0) return f.Error("must be positive");
    return absl::OkStatus();
  };
  (*h)["shift_terminal"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    if (f.value().is_null()) return absl::OkStatus();
    ASSIGN_OR_RETURN(double v, f.Number());
    if (v == 1.0) return f.Error("must differ from 1 (the stretch divides by 1 - shift_terminal)");
    if (v != 0.0) c->shift_terminal = v;  // diffusers tests `if self.config.shift_terminal:`, so 0 is off
    return absl::OkStatus();
  };
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "use_dynamic_shifting"}) {
    (*h)[key] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.MustBe(false); };
  }
  (*h)["time_shift_type"] = [](const FieldReader& f, FlowSchedulerConfig*) {
    return f.OneOf({"exponential", "linear"});  // used only with use_dynamic_shifting
  };
}

std::map<std::string, Handler> UniPCFields() {
  std::map<std::string, Handler> h;
  AddCommonFields(&h);
  h["flow_shift"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    ASSIGN_OR_RETURN(c->shift, f.Number());
    if (!(c->shift > 0) || !std::isfinite(c->shift)) return f.Error("must be a positive number");
    return absl::OkStatus();
  };
  h["solver_order"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    ASSIGN_OR_RETURN(c->solver_order, f.Int());
    if (c->solver_order < 1 || c->solver_order > 8) return f.Error("must be between 1 and 8");
    return absl::OkStatus();
  };
  h["solver_type"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    ASSIGN_OR_RETURN(std::string v, f.String());
    if (v == "bh1") {
      c->solver_type = UniPCSolverType::kBh1;
    } else if (v == "bh2" || v == "midpoint" || v == "heun" || v == "logrho") {
      c->solver_type = UniPCSolverType::kBh2;  // diffusers re-registers the last three as bh2
    } else {
      return f.Error("expected bh1 or bh2");
    }
    return absl::OkStatus();
  };
  h["lower_order_final"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    ASSIGN_OR_RETURN(c->lower_order_final, f.Bool());
    return absl::OkStatus();
  };
  h["final_sigmas_type"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    ASSIGN_OR_RETURN(std::string v, f.String());
    if (v == "zero") {
      c->final_sigmas_type = FinalSigmasType::kZero;
    } else if (v == "sigma_min") {
      c->final_sigmas_type = FinalSigmasType::kSigmaMin;
    } else {
      return f.Error("expected zero or sigma_min");
    }
    return absl::OkStatus();
  };
  h["disable_corrector"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    if (f.value().is_null()) return absl::OkStatus();
    if (!f.value().is_array()) return f.Error("expected a list of step indices");
    c->disable_corrector.clear();
    for (const Json& e : f.value()) {
      if (!e.is_number_integer()) return f.Error("expected a list of integer step indices");
      c->disable_corrector.push_back(e.get<int64_t>());
    }
    return absl::OkStatus();
  };
  h["prediction_type"] = [](const FieldReader& f, FlowSchedulerConfig*) -> absl::Status {
    ASSIGN_OR_RETURN(std::string v, f.String());
    if (v != "flow_prediction") {
      return f.Error("Baton implements only flow_prediction (with use_flow_sigmas: the Wan pipelines' scheduler)");
    }
    return absl::OkStatus();
  };
  h["use_flow_sigmas"] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.MustBe(true); };
  h["predict_x0"] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.MustBe(true); };
  h["thresholding"] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.MustBe(false); };
  h["solver_p"] = [](const FieldReader& f, FlowSchedulerConfig*) -> absl::Status {
    if (!f.value().is_null()) return f.Error("Baton implements only null (UniPC's own predictor)");
    return absl::OkStatus();
  };
  // The VP (beta) table and the discrete timestep spacing: __init__ and set_timesteps compute them, but the
  // use_flow_sigmas branch overwrites sigmas and timesteps without reading them. Checked as diffusers would.
  h["beta_schedule"] = [](const FieldReader& f, FlowSchedulerConfig*) {
    return f.OneOf({"linear", "scaled_linear", "squaredcos_cap_v2"});
  };
  h["timestep_spacing"] = [](const FieldReader& f, FlowSchedulerConfig*) {
    return f.OneOf({"linspace", "leading", "trailing"});
  };
  for (const char* key :
       {"beta_start", "beta_end", "dynamic_thresholding_ratio", "sample_max_value", "sigma_min", "sigma_max"}) {
    h[key] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.NumberOrNull(); };
  }
  h["steps_offset"] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.Int().status(); };
  h["rescale_betas_zero_snr"] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.Bool().status(); };
  h["trained_betas"] = [](const FieldReader& f, FlowSchedulerConfig*) -> absl::Status {
    if (!f.value().is_null() && !f.value().is_array()) return f.Error("expected a list of numbers or null");
    return absl::OkStatus();
  };
  return h;
}

std::map<std::string, Handler> EulerFields() {
  std::map<std::string, Handler> h;
  AddCommonFields(&h);
  h["shift"] = [](const FieldReader& f, FlowSchedulerConfig* c) -> absl::Status {
    ASSIGN_OR_RETURN(c->shift, f.Number());
    if (!(c->shift > 0) || !std::isfinite(c->shift)) return f.Error("must be a positive number");
    return absl::OkStatus();
  };
  h["invert_sigmas"] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.MustBe(false); };
  h["stochastic_sampling"] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.MustBe(false); };
  // Used only with use_dynamic_shifting (refused above).
  for (const char* key : {"base_shift", "max_shift"}) {
    h[key] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.NumberOrNull(); };
  }
  for (const char* key : {"base_image_seq_len", "max_image_seq_len"}) {
    h[key] = [](const FieldReader& f, FlowSchedulerConfig*) { return f.Int().status(); };
  }
  return h;
}

}  // namespace

std::string FlowSchedulerConfig::ClassName() const {
  return scheduler_class == FlowSchedulerClass::kUniPCMultistep ? kUniPC : kEuler;
}

absl::StatusOr<FlowSchedulerConfig> ParseFlowSchedulerConfig(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  FlowSchedulerConfig c;
  auto name = j.find("_class_name");
  if (name != j.end()) {
    if (!name->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": field '_class_name' = ", name->dump(), ": expected a string"));
    }
    const std::string n = name->get<std::string>();
    if (n == kUniPC) {
      c.scheduler_class = FlowSchedulerClass::kUniPCMultistep;
    } else if (n == kEuler) {
      c.scheduler_class = FlowSchedulerClass::kFlowMatchEulerDiscrete;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(source, ": field '_class_name' = \"", n, "\": Baton samples with ",
                                                     kUniPC, " (flow sigmas) or ", kEuler));
    }
  } else if (j.contains("shift") && !j.contains("flow_shift")) {
    c.scheduler_class = FlowSchedulerClass::kFlowMatchEulerDiscrete;
  }
  const bool unipc = c.scheduler_class == FlowSchedulerClass::kUniPCMultistep;
  const std::map<std::string, Handler> fields = unipc ? UniPCFields() : EulerFields();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.key().empty() && it.key()[0] == '_') continue;  // _class_name, _diffusers_version, _name_or_path
    auto h = fields.find(it.key());
    if (h == fields.end()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": field '", it.key(), "' = ", it.value().dump(),
                                                     ": not a ", c.ClassName(), " option Baton knows"));
    }
    RETURN_IF_ERROR(h->second(FieldReader(source, it.key(), it.value()), &c));
  }
  if (unipc) {
    // diffusers' defaults are prediction_type "epsilon" and use_flow_sigmas false: a VP (DDPM-style) scheduler.
    if (!j.contains("prediction_type")) {
      return absl::InvalidArgumentError(
          absl::StrCat(source,
                       ": field 'prediction_type' missing (diffusers' default \"epsilon\"): Baton implements only "
                       "flow_prediction"));
    }
    if (!j.contains("use_flow_sigmas")) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": field 'use_flow_sigmas' missing (diffusers' default false): Baton implements only true"));
    }
    RETURN_IF_ERROR(CheckFinalStep(c, source));
  }
  return c;
}

absl::Status CheckFinalStep(const FlowSchedulerConfig& c, const std::string& source) {
  if (c.scheduler_class != FlowSchedulerClass::kUniPCMultistep || c.final_sigmas_type != FinalSigmasType::kZero) {
    return absl::OkStatus();
  }
  if (c.solver_type == UniPCSolverType::kBh1) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        ": field 'solver_type' = \"bh1\" with final_sigmas_type \"zero\": B(h) = h is infinite on the last "
        "step (σ = 0), and diffusers' α·B(h)·0 there makes every sample NaN; use bh2 or final_sigmas_type "
        "\"sigma_min\""));
  }
  if (c.solver_order >= 2 && !c.lower_order_final) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": field 'lower_order_final' = false with final_sigmas_type \"zero\" and solver_order ", c.solver_order,
        ": the last step is then a higher-order step to σ = 0, where λ = ln(α/σ) is infinite (diffusers "
        "returns inf/NaN); use "
        "lower_order_final true or final_sigmas_type \"sigma_min\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<FlowSchedulerConfig> LoadFlowSchedulerConfig(const std::string& path) {
  std::vector<std::string> tried;
  std::string file;
  if (IsDirectory(path)) {
    for (const std::string& candidate :
         {JoinPath(path, "scheduler_config.json"), JoinPath(path, "scheduler/scheduler_config.json")}) {
      tried.push_back(candidate);
      if (PathExists(candidate)) {
        file = candidate;
        break;
      }
    }
  } else {
    tried.push_back(path);
    if (PathExists(path)) file = path;
  }
  if (file.empty()) {
    return absl::NotFoundError(absl::StrCat("no scheduler config: tried ", absl::StrJoin(tried, ", ")));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(file, ": not valid JSON"));
  return ParseFlowSchedulerConfig(j, file);
}

FlowSchedulerConfig EulerAlternative(const FlowSchedulerConfig& config) {
  FlowSchedulerConfig e;
  e.scheduler_class = FlowSchedulerClass::kFlowMatchEulerDiscrete;
  e.num_train_timesteps = config.num_train_timesteps;
  e.shift = config.shift;
  e.shift_terminal = config.shift_terminal;
  return e;
}

}  // namespace baton
