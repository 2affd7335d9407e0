#include "stage_worker/request_checks.h"

#include <absl/strings/escaping.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <set>

#include "core/model/stage_io.h"
#include "core/tensor/shape.h"
#include "core/train/optimizer.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Kind = v1::EnvelopeHeader;

std::string Quoted(const std::string& s) { return absl::StrCat("'", absl::CHexEscape(s.substr(0, 200)), "'"); }

absl::Status Invalid(absl::string_view what, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
}

// Whether this stage receives `kind` at all (a TARGET pushed to a middle stage would sit in the inbox forever).
bool Receives(const ExpectedStageIO& e, Kind::Kind kind) {
  switch (kind) {
    case Kind::INPUTS:
      return e.takes_inputs;
    case Kind::TARGET:
      return e.takes_target;
    case Kind::ACTIVATION:
      return e.takes_activation;
    case Kind::GRADIENT:
      return e.takes_gradient;
    case Kind::CONSTANTS:
    case Kind::ROPE:
    case Kind::LORA_WEIGHTS:
      return true;
    default:
      return false;
  }
}

absl::Status CheckFinite(absl::string_view what, const std::string& name, const at::Tensor& t) {
  if (t.is_floating_point() && t.numel() > 0 && !at::isfinite(t).all().item<bool>()) {
    return Invalid(what, absl::StrCat("tensor ", Quoted(name), " holds NaN or infinite values"));
  }
  return absl::OkStatus();
}

absl::Status CheckTarget(const ExpectedStageIO& e, absl::string_view what, const TensorMap& t) {
  if (absl::Status s = e.model->CheckWire(WireKind::kTarget, t, e.dtype); !s.ok()) return Invalid(what, s.message());
  for (const auto& [name, tensor] : t) RETURN_IF_ERROR(CheckFinite(what, name, tensor));
  return absl::OkStatus();
}

absl::Status CheckLoraWeights(const ExpectedStageIO& e, absl::string_view what, const TensorMap& t) {
  if (t.size() != e.lora_shapes.size()) {
    return Invalid(what, absl::StrCat(t.size(), " tensors, expected this stage's ", e.lora_shapes.size(), " adapters"));
  }
  for (const auto& [name, w] : t) {
    auto it = e.lora_shapes.find(name);
    if (it == e.lora_shapes.end()) return Invalid(what, absl::StrCat(Quoted(name), " is no adapter of this stage"));
    if (!w.is_floating_point()) return Invalid(what, absl::StrCat(Quoted(name), " is not floating point"));
    RETURN_IF_ERROR(CheckExactShape(absl::StrCat(what, ": ", Quoted(name)), it->second, w));
    RETURN_IF_ERROR(CheckFinite(what, name, w));
  }
  return absl::OkStatus();
}

absl::Status CheckStateTensors(const ExpectedStageIO& e, const TensorMap& t) {
  const std::string what = "LORA_STATE";
  TensorMap adapters;
  for (const auto& [name, x] : t) {
    if (name == kOptimizerStepKey) {
      if (x.numel() != 1 || x.is_floating_point() || x.item<int64_t>() < 0) {
        return Invalid(what, "\"__step__\" must be one integer >= 0");
      }
      continue;
    }
    if (absl::StartsWith(name, kProdigyScalarsPrefix)) {  // Prodigy's d and companions, shared by every stage
      if (x.numel() != 1) return Invalid(what, absl::StrCat(Quoted(name), " must be one number"));
      continue;
    }
    const std::string adapter = StateParam(name);
    if (adapter.empty()) {
      adapters[name] = x;
      continue;
    }
    auto it = e.lora_shapes.find(adapter);
    if (it == e.lora_shapes.end())
      return Invalid(what, absl::StrCat(Quoted(name), " is the optimizer state of no adapter here"));
    if (x.scalar_type() != StateDtype(name)) {
      return Invalid(what, absl::StrCat(Quoted(name), " is not ", c10::toString(StateDtype(name))));
    }
    RETURN_IF_ERROR(CheckExactShape(absl::StrCat(what, ": ", Quoted(name)), StateShape(name, it->second), x));
    if (x.is_floating_point()) RETURN_IF_ERROR(CheckFinite(what, name, x));
  }
  if (!t.count(kOptimizerStepKey)) return Invalid(what, "no \"__step__\"");
  return CheckLoraWeights(e, what, adapters);
}

// ROPE: one key's tables, each named <table>/<key> on the wire; the family checks them under their bare names.
absl::Status CheckRope(const ExpectedStageIO& e, absl::string_view what, const TensorMap& t) {
  TensorMap tables;
  std::string key;
  for (const auto& [name, x] : t) {
    const size_t slash = name.rfind('/');
    if (slash == std::string::npos || slash == 0 || (!key.empty() && name.substr(slash + 1) != key)) {
      return Invalid(what, "expected tables named <table>/<key>, all with the same key");
    }
    key = name.substr(slash + 1);
    tables[name.substr(0, slash)] = x;
  }
  if (absl::Status s = e.model->CheckWire(WireKind::kTables, tables, e.dtype); !s.ok()) {
    return Invalid(what, s.message());
  }
  return absl::OkStatus();
}

// CONSTANTS: the shell's constants plus the wire's empty "rope_key/<key>" entry naming the tables to use.
absl::Status CheckConstants(const ExpectedStageIO& e, const TensorMap& t) {
  TensorMap constants = t;
  int keys = 0;
  for (auto it = constants.begin(); it != constants.end();) {
    if (absl::StartsWith(it->first, kTablesKeyPrefix) && keys == 0) {
      ++keys;
      it = constants.erase(it);
    } else {
      ++it;
    }
  }
  if (keys == 0) return absl::InvalidArgumentError("constants: no rope_key/<key> entry");
  return e.model->CheckWire(WireKind::kConstants, constants, e.dtype);
}

}  // namespace

absl::Status CheckJob(const ExpectedStageIO& e, const std::string& job_id, const std::string& config_hash,
                      absl::string_view what) {
  if (job_id != e.job_id || config_hash != e.config_hash) {
    return absl::FailedPreconditionError(absl::StrCat(what, " is for job ", Quoted(job_id), " (config hash ",
                                                      Quoted(config_hash), ") but this worker runs job ",
                                                      Quoted(e.job_id), " (config hash ", Quoted(e.config_hash), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckStepJob(const ExpectedStageIO& e, const std::string& job_id, const std::string& config_hash,
                          absl::string_view what) {
  return CheckJob(e, job_id, config_hash.empty() ? e.config_hash : config_hash, what);
}

absl::Status CheckStepWindow(const ExpectedStageIO& e, int64_t step, absl::string_view what) {
  if (step < 0) return Invalid(what, absl::StrCat("step ", step, " is negative"));
  if (e.current_step < 0) return absl::OkStatus();
  if (step < e.current_step || step > e.current_step + ExpectedStageIO::kStepWindow) {
    return absl::OutOfRangeError(absl::StrCat(what, ": step ", step, " is outside [", e.current_step, ", ",
                                              e.current_step + ExpectedStageIO::kStepWindow,
                                              "] (this worker is at step ", e.current_step, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckEnvelopeHeader(const ExpectedStageIO& e, const v1::EnvelopeHeader& h) {
  const std::string what = absl::StrCat(Kind::Kind_IsValid(h.kind()) ? Kind::Kind_Name(h.kind()) : "unknown",
                                        " push from ", Quoted(h.sender()));
  RETURN_IF_ERROR(CheckJob(e, h.job_id(), h.config_hash(), what));
  if (h.pass() == 0) RETURN_IF_ERROR(CheckStepWindow(e, h.step(), what));
  if (h.step() < 0) return Invalid(what, absl::StrCat("step ", h.step(), " is negative"));
  if (!Kind::Kind_IsValid(h.kind()) || !Receives(e, h.kind())) {
    return Invalid(what, absl::StrCat("this stage receives no envelopes of kind ", static_cast<int>(h.kind())));
  }
  if (h.pass() != 0 && (h.kind() == Kind::TARGET || h.kind() == Kind::GRADIENT)) {
    return Invalid(what, absl::StrCat("forward-only pass ", h.pass(), " takes no ", Kind::Kind_Name(h.kind())));
  }
  if (h.micro_batch() < 0 || h.micro_batch() >= e.micro_batches) {
    return Invalid(what, absl::StrCat("micro-batch ", h.micro_batch(), " is outside [0, ", e.micro_batches, ")"));
  }
  if (h.chunk() < 0 || h.chunk() >= e.num_chunks) {
    return Invalid(what, absl::StrCat("chunk ", h.chunk(), " is outside [0, ", e.num_chunks, ")"));
  }
  if (h.kind() == Kind::LORA_WEIGHTS && h.micro_batch() != 0) {
    return Invalid(
        what, absl::StrCat("LORA_WEIGHTS belong to the whole step and carry micro-batch 0, not ", h.micro_batch()));
  }
  return absl::OkStatus();
}

absl::Status CheckEnvelopeTensors(const ExpectedStageIO& e, const v1::EnvelopeHeader& h, const TensorMap& t) {
  const std::string what = absl::StrCat(Kind::Kind_IsValid(h.kind()) ? Kind::Kind_Name(h.kind()) : "unknown",
                                        " for step ", h.step(), " micro-batch ", h.micro_batch());
  absl::Status s;
  switch (h.kind()) {
    case Kind::INPUTS:
      s = e.model->CheckWire(WireKind::kInputs, t, e.dtype);
      break;
    case Kind::ACTIVATION:
      s = e.model->CheckWire(WireKind::kActivation, t, e.dtype);
      break;
    case Kind::CONSTANTS:
      s = CheckConstants(e, t);
      break;
    case Kind::TARGET:
      return CheckTarget(e, what, t);
    case Kind::GRADIENT:
      s = e.model->CheckWire(WireKind::kGradient, t, e.dtype);
      break;
    case Kind::LORA_WEIGHTS:
      return CheckLoraWeights(e, what, t);
    case Kind::ROPE:
      return CheckRope(e, what, t);
    default:
      return Invalid(what, "unknown kind");
  }
  return s.ok() ? s : Invalid(what, s.message());
}

absl::Status CheckEnvelope(const ExpectedStageIO& e, const ReceivedEnvelope& envelope) {
  RETURN_IF_ERROR(CheckEnvelopeHeader(e, envelope.header));
  return CheckEnvelopeTensors(e, envelope.header, envelope.tensors);
}

// A forward-only pass: 1..micro_batches micro-batches, FORWARD actions only, each (chunk, micro-batch) once.
static absl::Status CheckPassPlan(const ExpectedStageIO& e, const v1::StepPlan& plan) {
  const std::string what = absl::StrCat("pass ", plan.pass(), " plan");
  if (plan.step() < 0) return Invalid(what, absl::StrCat("step ", plan.step(), " is negative"));
  if (plan.micro_batches() < 1 || plan.micro_batches() > e.micro_batches) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", plan.micro_batches(), " micro-batches, outside [1, ", e.micro_batches, "]"));
  }
  std::set<std::pair<int32_t, int32_t>> seen;
  for (const v1::Action& action : plan.actions()) {
    if (action.type() != v1::Action::FORWARD) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": a forward-only pass takes FORWARD actions only"));
    }
    if (action.micro_batch() < 0 || action.micro_batch() >= plan.micro_batches()) {
      return Invalid(what,
                     absl::StrCat("micro-batch ", action.micro_batch(), " outside [0, ", plan.micro_batches(), ")"));
    }
    if (action.chunk() < 0 || action.chunk() >= e.num_chunks) {
      return Invalid(what, absl::StrCat("chunk ", action.chunk(), " outside [0, ", e.num_chunks, ")"));
    }
    if (!seen.insert({action.chunk(), action.micro_batch()}).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": micro-batch ", action.micro_batch(), " twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStepPlan(const ExpectedStageIO& e, const v1::StepPlan& plan) {
  RETURN_IF_ERROR(CheckStepJob(e, plan.job_id(), plan.config_hash(), absl::StrCat("step plan ", plan.step())));
  if (plan.pass() != 0) return CheckPassPlan(e, plan);
  RETURN_IF_ERROR(CheckStepWindow(e, plan.step(), "step plan"));
  // A replica runs a slice of the step: 1..the configured micro-batches (stage.proto, StepPlan.first_micro_batch).
  if (plan.micro_batches() < 1 || plan.micro_batches() > e.micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat("step plan ", plan.step(), ": ", plan.micro_batches(),
                                                   " micro-batches, outside [1, ", e.micro_batches,
                                                   "] (the job was configured with ", e.micro_batches, ")"));
  }
  if (plan.first_micro_batch() < 0) {
    return Invalid("step plan", absl::StrCat("first_micro_batch ", plan.first_micro_batch(), " is negative"));
  }
  for (const v1::Action& action : plan.actions()) {
    if (action.micro_batch() < 0 || action.micro_batch() >= plan.micro_batches()) {
      return Invalid("step plan",
                     absl::StrCat("micro-batch ", action.micro_batch(), " outside [0, ", plan.micro_batches(), ")"));
    }
    if (action.chunk() < 0 || action.chunk() >= e.num_chunks) {
      return Invalid("step plan", absl::StrCat("chunk ", action.chunk(), " outside [0, ", e.num_chunks, ")"));
    }
    if (action.type() != v1::Action::FORWARD && action.type() != v1::Action::BACKWARD) {
      return absl::InvalidArgumentError("step plan: action without a type");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckExactShape(absl::string_view what, at::IntArrayRef expected, const at::Tensor& got) {
  if (got.sizes() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has shape ", ShapeString(got.sizes()), ", expected ", ShapeString(expected)));
  }
  return absl::OkStatus();
}

absl::Status CheckLoraState(const ExpectedStageIO& expected, const std::map<std::string, at::Tensor>& tensors) {
  return CheckStateTensors(expected, tensors);
}

}  // namespace baton
