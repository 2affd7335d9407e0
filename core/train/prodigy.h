// Prodigy (prodigyopt 1.1, Mishchenko & Defazio): Adam whose step size d is estimated from the run itself, so `lr`
// stays 1. Its step in two halves around the one global sum it needs: the per-parameter terms of the estimate (with s
// as the step leaves it; nothing changes yet), the new d from their sums, then the moments, s and the update at it.
// Operation for operation prodigyopt's Prodigy.step; the state lives in the Optimizer's map (optimizer.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/train/job.h"

namespace baton {

// The estimate's scalars, shared by every parameter: d (the step size), its running maximum and the numerator of
// its estimate. Saved with the state under these keys (0-dim double tensors).
// And k, prodigyopt's own count of the steps it made (a step at rate 0, a warm-up's first, makes none).
struct ProdigyScalars {
  double d = 0, d_max = 0, d_numerator = 0;
  int64_t k = 0;
  static ProdigyScalars Initial(const ProdigyConfig& c) { return {c.d0, c.d0, 0.0, 0}; }
};
inline constexpr char kProdigyScalarsPrefix[] = "__prodigy_";
inline constexpr char kProdigyD[] = "__prodigy_d__";
inline constexpr char kProdigyDMax[] = "__prodigy_d_max__";
inline constexpr char kProdigyDNumerator[] = "__prodigy_d_numerator__";
inline constexpr char kProdigyK[] = "__prodigy_k__";

// What ProdigyNext made of a step's terms: the new scalars, and whether to update (false: Σ|s| was 0).
struct ProdigyOutcome {
  ProdigyScalars scalars;
  bool apply = false;
};

// d·lr·(the bias correction of step s.k when use_bias_correction): the step's rate.
double ProdigyDlr(const OptimizerConfig& opt, const ProdigyScalars& s, double lr);

// The first half for `names`, changing nothing: [n, 2] double on the device, per parameter g·(p0 − p) and Σ|s| with
// s as the step will leave it (p0: the parameters at the first step), as prodigyopt reads them (fp32 dot and sum).
// Nothing is read back. Each stage of a pipeline computes its own adapters' (the stage-local optimizer's Estimate).
at::Tensor ProdigyTerms(const OptimizerConfig& opt, const ProdigyScalars& s, double dlr,
                        const std::map<std::string, at::Tensor>& state, const std::map<std::string, at::Tensor>& params,
                        const std::vector<at::Tensor>& grads, const std::vector<std::string>& names);

// The new scalars from every parameter's terms (`terms`: n × 2, in name order, added as prodigyopt adds them). False
// when Σ|s| is 0 (all gradients zero): prodigyopt then leaves everything as it is and makes no update.
bool ProdigyNext(const OptimizerConfig& opt, double dlr, const std::vector<double>& terms, ProdigyScalars& s);

// The second half: each gradient taken into exp_avg, exp_avg_sq and s at the step's d (`before`: the scalars the
// terms were computed with; the state made at the first step), then, when ProdigyNext said so (`apply`), the update
// at the new d `after` (and the step's rate `dlr`, from the d before).
void ProdigyApply(const OptimizerConfig& opt, const ProdigyScalars& before, const ProdigyScalars& after, bool apply,
                  double dlr, std::map<std::string, at::Tensor>& state, std::map<std::string, at::Tensor>& params,
                  std::vector<at::Tensor>& grads, const std::vector<std::string>& names);

}  // namespace baton
