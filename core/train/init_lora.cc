#include "core/train/init_lora.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <set>
#include <vector>

#include "core/lora/adapter_file.h"
#include "core/tensor/shape.h"
#include "core/util/status.h"

namespace baton {
namespace {

// What keeps the file's adapters from being the job's seeded ones (module sets, types, ranks, shapes); empty: none.
std::vector<std::string> InitLoraProblems(const std::map<std::string, LoraWeights>& weights,
                                          const std::map<std::string, at::Tensor>& converted, const LoraSpec& spec,
                                          const std::map<std::string, at::Tensor>& seeded,
                                          const std::set<std::string>& targeted) {
  std::vector<std::string> extra, missing, misfit;
  for (const auto& [module, w] : weights) {
    if (!targeted.count(module)) {
      extra.push_back(module);
    } else if (w.type != spec.type) {
      misfit.push_back(absl::StrCat(module, " is ", AdapterTypeName(w.type), " but the job's lora.type is ",
                                    AdapterTypeName(spec.type)));
    } else if (w.A.defined() && w.A.size(0) != spec.rank) {
      misfit.push_back(absl::StrCat(module, " has rank ", w.A.size(0), " but the job's lora.rank is ", spec.rank));
    }
  }
  for (const auto& module : targeted) {
    if (!weights.count(module)) missing.push_back(module);
  }
  if (misfit.empty()) {
    for (const auto& [name, t] : converted) {
      auto it = seeded.find(name);
      if (it == seeded.end() && targeted.count(AdapterModuleOf(name))) {
        misfit.push_back(absl::StrCat(name, " is not a parameter of the job's adapter"));
      } else if (it != seeded.end() && t.sizes() != it->second.sizes()) {
        misfit.push_back(absl::StrCat(name, " is ", ShapeString(t.sizes()), " but the model needs ",
                                      ShapeString(it->second.sizes())));
      }
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
  return problems;
}

}  // namespace

absl::StatusOr<std::map<std::string, at::Tensor>> LoadInitLora(const std::string& path, const LoraSpec& spec,
                                                               const std::map<std::string, at::Tensor>& seeded) {
  ASSIGN_OR_RETURN(auto file_weights, LoadLoraFile(path));
  std::set<std::string> targeted;
  for (const auto& [name, t] : seeded) targeted.insert(AdapterModuleOf(name));
  auto weights = ResolveLycorisNames(std::move(file_weights), {targeted.begin(), targeted.end()});
  if (!weights.ok()) return Annotate(weights.status(), absl::StrCat("init_lora ", path));
  const auto converted = LoraWeightsToParameters(*weights, spec.alpha / static_cast<double>(spec.rank));
  std::vector<std::string> problems = InitLoraProblems(*weights, converted, spec, seeded, targeted);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_lora ", path, " does not match the job's lora spec: ", absl::StrJoin(problems, "; ")));
  }
  std::map<std::string, at::Tensor> out;
  for (auto& [name, t] : converted) out[name] = t.to(at::kCPU, at::kFloat).contiguous();
  return out;
}

}  // namespace baton
