#include "stage_worker/request_checks.h"

#include <absl/strings/escaping.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include "core/pipeline/stage_io.h"
#include "core/tensor/shape.h"
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
  if (t.size() != 1 || !t.count("target")) return Invalid(what, "expected exactly one tensor 'target'");
  const at::Tensor& target = t.at("target");
  if (target.dim() != 3 || target.size(2) != e.model.out_dim() || !target.is_floating_point()) {
    return Invalid(what,
                   absl::StrCat("'target' is ", c10::toString(target.scalar_type()), " ", ShapeString(target.sizes()),
                                ", expected floating [b, Si, ", e.model.out_dim(), "]"));
  }
  return CheckFinite(what, "target", target);
}

// GRADIENT answers this stage's ACTIVATION: img + txt, or joint (txt_len is an integer and gets none).
absl::Status CheckGradient(const ExpectedStageIO& e, absl::string_view what, const TensorMap& t) {
  const bool joint = t.size() == 1 && t.count("joint");
  const bool split = t.size() == 2 && t.count("img") && t.count("txt");
  if (!joint && !split) return Invalid(what, "expected exactly 'img' and 'txt', or 'joint'");
  for (const auto& [name, g] : t) {
    if (g.dim() != 3 || g.size(2) != e.model.inner_dim() || !g.is_floating_point()) {
      return Invalid(what, absl::StrCat("'", name, "' is ", c10::toString(g.scalar_type()), " ", ShapeString(g.sizes()),
                                        ", expected floating [b, S, ", e.model.inner_dim(), "]"));
    }
  }
  if (split && t.at("img").size(0) != t.at("txt").size(0)) return Invalid(what, "img and txt batch sizes differ");
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

absl::Status CheckRope(absl::string_view what, const TensorMap& t) {
  if (t.size() != 2) return Invalid(what, "expected exactly rope_cos/<key> and rope_sin/<key>");
  const std::string& cos_name = t.begin()->first;
  if (!absl::StartsWith(cos_name, "rope_cos/") ||
      !t.count(absl::StrCat("rope_sin/", cos_name.substr(strlen("rope_cos/"))))) {
    return Invalid(what, "expected exactly rope_cos/<key> and rope_sin/<key> with the same key");
  }
  const at::Tensor& cos = t.begin()->second;
  const at::Tensor& sin = std::next(t.begin())->second;
  if (cos.dim() != 2 || cos.scalar_type() != at::kFloat || cos.sizes() != sin.sizes() ||
      sin.scalar_type() != at::kFloat) {
    return Invalid(what, absl::StrCat("tables are ", ShapeString(cos.sizes()), " and ", ShapeString(sin.sizes()),
                                      ", expected two equal fp32 [S, Dh]"));
  }
  return absl::OkStatus();
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

absl::Status CheckStepWindow(const ExpectedStageIO& e, int64_t step, absl::string_view what) {
  if (step < 0) return absl::OutOfRangeError(absl::StrCat(what, ": step ", step, " is negative"));
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
  RETURN_IF_ERROR(CheckStepWindow(e, h.step(), what));
  if (!Kind::Kind_IsValid(h.kind()) || !Receives(e, h.kind())) {
    return Invalid(what, absl::StrCat("this stage receives no envelopes of kind ", static_cast<int>(h.kind())));
  }
  if (h.micro_batch() < 0 || h.micro_batch() >= e.micro_batches) {
    return absl::OutOfRangeError(
        absl::StrCat(what, ": micro-batch ", h.micro_batch(), " is outside [0, ", e.micro_batches, ")"));
  }
  if (h.chunk() < 0 || h.chunk() >= e.num_chunks) {
    return absl::OutOfRangeError(absl::StrCat(what, ": chunk ", h.chunk(), " is outside [0, ", e.num_chunks, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckEnvelopeTensors(const ExpectedStageIO& e, const v1::EnvelopeHeader& h, const TensorMap& t) {
  const std::string what = absl::StrCat(Kind::Kind_IsValid(h.kind()) ? Kind::Kind_Name(h.kind()) : "unknown",
                                        " for step ", h.step(), " micro-batch ", h.micro_batch());
  absl::Status s;
  switch (h.kind()) {
    case Kind::INPUTS:
      // The coordinator's inputs are converted to the compute dtype on use: any floating dtype is fine here (and
      // checking in the tensor's own dtype copies nothing).
      s = InputsFromTensors(t, e.model, t.empty() ? at::kFloat : t.begin()->second.scalar_type()).status();
      if (s.ok() && t.size() != 2) s = absl::InvalidArgumentError("inputs: unexpected extra tensors");
      for (const auto& [name, x] : t) {
        if (s.ok() && !x.is_floating_point())
          s = absl::InvalidArgumentError(absl::StrCat("inputs: '", name, "' is not floating"));
      }
      break;
    case Kind::ACTIVATION:
      s = ActivationsFromTensors(t, e.model, e.dtype).status();
      break;
    case Kind::CONSTANTS:
      s = ConstantsFromTensors(t, e.model).status();
      break;
    case Kind::TARGET:
      return CheckTarget(e, what, t);
    case Kind::GRADIENT:
      return CheckGradient(e, what, t);
    case Kind::LORA_WEIGHTS:
      return CheckLoraWeights(e, what, t);
    case Kind::ROPE:
      return CheckRope(what, t);
    default:
      return Invalid(what, "unknown kind");
  }
  return s.ok() ? s : Invalid(what, s.message());
}

absl::Status CheckEnvelope(const ExpectedStageIO& e, const ReceivedEnvelope& envelope) {
  RETURN_IF_ERROR(CheckEnvelopeHeader(e, envelope.header));
  return CheckEnvelopeTensors(e, envelope.header, envelope.tensors);
}

absl::Status CheckStepPlan(const ExpectedStageIO& e, const v1::StepPlan& plan) {
  RETURN_IF_ERROR(CheckJob(e, plan.job_id(), plan.config_hash(), absl::StrCat("step plan ", plan.step())));
  RETURN_IF_ERROR(CheckStepWindow(e, plan.step(), "step plan"));
  if (plan.micro_batches() != e.micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat("step plan ", plan.step(), ": ", plan.micro_batches(),
                                                   " micro-batches but the job was configured with ", e.micro_batches));
  }
  for (const v1::Action& action : plan.actions()) {
    if (action.micro_batch() < 0 || action.micro_batch() >= e.micro_batches) {
      return absl::OutOfRangeError(
          absl::StrCat("step plan: micro-batch ", action.micro_batch(), " outside [0, ", e.micro_batches, ")"));
    }
    if (action.chunk() < 0 || action.chunk() >= e.num_chunks) {
      return absl::OutOfRangeError(
          absl::StrCat("step plan: chunk ", action.chunk(), " outside [0, ", e.num_chunks, ")"));
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

}  // namespace baton
