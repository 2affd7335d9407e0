#include "core/tensor/checked_load.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <map>
#include <memory>

#include "core/tensor/shape.h"
#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {

absl::Status LoadCheckedTensors(const std::vector<std::pair<std::string, at::Tensor>>& wanted,
                                const TensorSource& source, const std::vector<std::string>& unexpected,
                                const std::string& what, const std::set<std::string>& may_be_missing) {
  std::vector<std::string> missing, misshaped;
  std::vector<std::pair<std::string, at::Tensor>> todo;
  for (const auto& [name, tensor] : wanted) {
    auto shape = source.shape(name);
    if (!shape.ok()) {
      if (!absl::IsNotFound(shape.status())) return shape.status();
      if (!may_be_missing.count(name)) missing.push_back(name);
    } else if (*shape != tensor.sizes().vec()) {
      misshaped.push_back(
          absl::StrCat(name, " (expected ", ShapeString(tensor.sizes()), ", found ", ShapeString(*shape), ")"));
    } else {
      todo.emplace_back(name, tensor);
    }
  }
  if (!missing.empty() || !misshaped.empty() || !unexpected.empty()) {
    std::string msg = what;
    if (!missing.empty()) absl::StrAppend(&msg, "; missing keys: ", absl::StrJoin(missing, ", "));
    if (!misshaped.empty()) absl::StrAppend(&msg, "; mis-shaped keys: ", absl::StrJoin(misshaped, ", "));
    if (!unexpected.empty()) absl::StrAppend(&msg, "; unexpected keys: ", absl::StrJoin(unexpected, ", "));
    return absl::InvalidArgumentError(msg);
  }
  for (auto& [name, tensor] : todo) {
    ASSIGN_OR_RETURN(at::Tensor t, source.load(name, tensor.scalar_type()));
    at::Tensor target = tensor;
    RETURN_IF_ERROR(TorchCall(name.c_str(), [&] {
      at::NoGradGuard no_grad;
      target.copy_(t);
    }));
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, at::Tensor>> NamedTensors(const torch::nn::Module& module, bool buffers) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module.named_parameters()) out.emplace_back(p.key(), p.value());
  if (buffers) {
    for (const auto& b : module.named_buffers()) out.emplace_back(b.key(), b.value());
  }
  return out;
}

absl::Status LoadModuleFromFolder(torch::nn::Module& module, bool buffers, const std::string& dir,
                                  const std::string& stem, const std::function<bool(const std::string&)>& ours,
                                  const std::string& what, const std::set<std::string>& may_be_missing) {
  ASSIGN_OR_RETURN(std::vector<std::string> paths, SafetensorsShardPaths(dir, stem));
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> key_to_file;
  for (const auto& p : paths) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(p));
    for (const auto& key : file->Keys()) key_to_file[key] = file.get();
    files.push_back(std::move(file));
  }
  std::vector<std::pair<std::string, at::Tensor>> wanted = NamedTensors(module, buffers);
  std::set<std::string> known;
  for (const auto& [name, tensor] : wanted) known.insert(name);
  std::vector<std::string> unexpected;
  for (const auto& [key, file] : key_to_file) {
    if (ours(key) && !known.count(key)) unexpected.push_back(key);
  }
  TensorSource source;
  source.shape = [&](const std::string& key) -> absl::StatusOr<std::vector<int64_t>> {
    auto it = key_to_file.find(key);
    if (it == key_to_file.end()) return absl::NotFoundError(key);
    ASSIGN_OR_RETURN(SafetensorsEntry e, it->second->Entry(key));
    return e.shape;
  };
  source.load = [&](const std::string& key, at::ScalarType dtype) { return key_to_file.at(key)->Load(key, dtype); };
  return LoadCheckedTensors(wanted, source, unexpected, what, may_be_missing);
}

}  // namespace baton
