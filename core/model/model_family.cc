#include "core/model/model_family.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <nlohmann/json.hpp>

#include "core/model/flux2_family.h"
#include "core/model/wan_family.h"
#include "core/tensor/shape.h"
#include "core/util/files.h"
#include "core/util/json_field.h"
#include "core/util/status.h"

namespace baton {
namespace {

using Opener = absl::StatusOr<std::unique_ptr<ModelFamily>> (*)(const std::string& path,
                                                                const std::string& config_path);

// The one place that knows the families: config.json `_class_name` -> opener.
struct KnownFamily {
  const char* class_name;
  Opener open;
};
constexpr KnownFamily kFamilies[] = {
    {"Flux2Transformer2DModel", &Flux2Family::Open},
    {"WanTransformer3DModel", &WanFamily::Open},
    {"WanModel", &WanFamily::Open},  // the original Wan config.json
};

// The config.json describing `path`: `config_path` when given, else the folder's (or its transformer/ subfolder's);
// "" for a single file without one.
std::string ConfigFor(const std::string& path, const std::string& config_path) {
  if (!config_path.empty()) return config_path;
  if (!IsDirectory(path)) return "";
  if (PathExists(JoinPath(path, "config.json"))) return JoinPath(path, "config.json");
  for (const char* sub : {"transformer/config.json", "high_noise_model/config.json"}) {  // diffusers / original A14B
    if (PathExists(JoinPath(path, sub))) return JoinPath(path, sub);
  }
  return JoinPath(path, "config.json");  // missing: the family's opener says so
}

absl::StatusOr<std::string> ClassName(const std::string& config) {
  if (config.empty() || !PathExists(config)) return std::string();  // the opener reports what is missing
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(config, kMaxConfigJsonBytes));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(config, " is not a JSON object"));
  }
  auto it = j.find("_class_name");
  if (it == j.end()) return std::string();
  if (!it->is_string()) return absl::InvalidArgumentError(absl::StrCat(config, ": _class_name is not a string"));
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelFamily>> OpenModel(const std::string& path, const std::string& config_path) {
  const std::string config = ConfigFor(path, config_path);
  ASSIGN_OR_RETURN(std::string class_name, ClassName(config));
  // No _class_name (a BFL single file's hand-written config, configs before diffusers added it): FLUX.2, as before
  // there were families.
  if (class_name.empty()) class_name = kFamilies[0].class_name;
  std::vector<std::string> known;
  for (const KnownFamily& f : kFamilies) {
    if (class_name == f.class_name) return f.open(path, config_path);
    known.push_back(f.class_name);
  }
  return absl::InvalidArgumentError(absl::StrCat("model ", path, ": unknown transformer class '", class_name, "' in ",
                                                 config, " (known: ", absl::StrJoin(known, ", "), ")"));
}

absl::StatusOr<TensorMap> WithoutLossWeighting(const TensorMap& target) {
  TensorMap rest = target;
  auto it = rest.find(kLossWeightingName);
  if (it == rest.end()) return rest;
  const at::Tensor w = it->second;
  rest.erase(it);
  auto t = rest.find("target");
  const int64_t batch = t == rest.end() ? -1 : t->second.size(0);
  if (w.dim() != 1 || !w.is_floating_point() || (batch >= 0 && w.size(0) != batch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'loss_weighting' is ", ShapeString(w.sizes()), ", expected floating [", batch, "]"));
  }
  if (!(w.to(at::kCPU).min().item<double>() >= 0) || !w.isfinite().all().item<bool>()) {
    return absl::InvalidArgumentError("'loss_weighting' holds a negative or non-finite weight");
  }
  return rest;
}

absl::StatusOr<std::unique_ptr<ModelFamily>> OpenModelConfig(const std::string& config_path) {
  ASSIGN_OR_RETURN(std::string class_name, ClassName(config_path));
  if (class_name.empty() || class_name == "Flux2Transformer2DModel") {
    ASSIGN_OR_RETURN(Flux2Config config, LoadFlux2Config(config_path));
    return std::unique_ptr<ModelFamily>(new Flux2Family(std::move(config), nullptr));
  }
  if (class_name == "WanTransformer3DModel" || class_name == "WanModel") {
    ASSIGN_OR_RETURN(WanConfig config, LoadWanConfig(config_path));
    return std::unique_ptr<ModelFamily>(new WanFamily(std::move(config)));
  }
  return absl::InvalidArgumentError(absl::StrCat(config_path, ": unknown transformer class '", class_name,
                                                 "' (known: Flux2Transformer2DModel, "
                                                 "WanTransformer3DModel, WanModel)"));
}

}  // namespace baton
