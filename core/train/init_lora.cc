#include "core/train/init_lora.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <set>
#include <vector>

#include "core/tensor/shape.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kLoraASuffix[] = ".lora_A.weight";

}  // namespace

absl::StatusOr<std::map<std::string, at::Tensor>> LoadInitLora(const std::string& path, const LoraSpec& spec,
                                                               const std::map<std::string, at::Tensor>& seeded) {
  ASSIGN_OR_RETURN(auto weights, LoadLoraFile(path));
  std::set<std::string> targeted;
  for (const auto& [name, t] : seeded) {
    if (absl::EndsWith(name, kLoraASuffix)) targeted.insert(name.substr(0, name.size() - strlen(kLoraASuffix)));
  }
  std::vector<std::string> extra, missing, misfit;
  for (const auto& [module, w] : weights) {
    if (!targeted.count(module)) extra.push_back(module);
  }
  for (const auto& module : targeted) {
    if (!weights.count(module)) missing.push_back(module);
  }
  for (const auto& [module, w] : weights) {
    if (!targeted.count(module)) continue;
    const at::Tensor& a = seeded.at(module + kLoraASuffix);
    const at::Tensor& b = seeded.at(module + ".lora_B.weight");
    if (w.A.size(0) != spec.rank) {
      misfit.push_back(absl::StrCat(module, " has rank ", w.A.size(0), " but the job's lora.rank is ", spec.rank));
    } else if (w.A.sizes() != a.sizes() || w.B.sizes() != b.sizes()) {
      misfit.push_back(absl::StrCat(module, " has lora_A ", ShapeString(w.A.sizes()), ", lora_B ",
                                    ShapeString(w.B.sizes()), " but the model needs ", ShapeString(a.sizes()), ", ",
                                    ShapeString(b.sizes())));
    }
  }
  std::vector<std::string> problems;
  if (!extra.empty()) {
    problems.push_back(
        absl::StrCat("adapters on modules the job's lora.targets do not select: ", absl::StrJoin(extra, ", ")));
  }
  if (!missing.empty()) {
    problems.push_back(absl::StrCat("no adapter for targeted modules: ", absl::StrJoin(missing, ", ")));
  }
  if (!misfit.empty()) problems.push_back(absl::StrJoin(misfit, "; "));
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_lora ", path, " does not match the job's lora spec: ", absl::StrJoin(problems, "; ")));
  }
  std::map<std::string, at::Tensor> out;
  for (auto& [name, t] : LoraWeightsToParameters(weights, spec.alpha / static_cast<double>(spec.rank))) {
    out[name] = t.to(at::kCPU, at::kFloat).contiguous();
  }
  return out;
}

}  // namespace baton
