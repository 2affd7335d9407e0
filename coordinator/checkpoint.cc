#include "coordinator/checkpoint.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/tensor/safetensors.h"
#include "core/tensor/torch_call.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/sha256.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kCheckpointsDir[] = "checkpoints";
constexpr char kStepPrefix[] = "step-";
constexpr char kTempMarker[] = ".tmp-";
constexpr char kStateFile[] = "state.json";
constexpr char kLoraFile[] = "lora.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";
constexpr int kFormatVersion = 1;

struct FileRecord {
  uint64_t bytes = 0;
  std::string sha256;  // lower-case hex
};

struct Manifest {
  int64_t step = 0;
  std::string job_hash;
  std::string extra_json;
  std::map<std::string, FileRecord> files;
};

enum class Verify { kSizes, kFull };

std::string CheckpointsRoot(const std::string& output_dir) { return JoinPath(output_dir, kCheckpointsDir); }

// "step-<N>" exactly (no suffix, N ≥ 0) → N.
bool ParseStepDirName(const std::string& name, int64_t* step) {
  if (!absl::StartsWith(name, kStepPrefix)) return false;
  std::string digits = name.substr(std::strlen(kStepPrefix));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return absl::SimpleAtoi(digits, step);
}

bool IsLeftoverName(const std::string& name) {
  return absl::StartsWith(name, kStepPrefix) && absl::StrContains(name, kTempMarker);
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Calls fn(name, path) for each entry of `dir`. A missing dir is an empty one.
absl::Status ForEachEntry(const std::string& dir,
                          const std::function<void(const std::string&, const std::string&)>& fn) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return absl::OkStatus();
  std::filesystem::directory_iterator it(dir, ec), end;
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
    fn(it->path().filename().string(), it->path().string());
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, kStateFile);
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto bad = [&](absl::string_view why) { return absl::DataLossError(absl::StrCat(path, ": ", why)); };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not valid JSON (truncated?)");
  if (!j.is_object()) return bad("expected a JSON object");
  if (j.contains("version") && j["version"] != kFormatVersion) {
    return bad(absl::StrCat("unsupported version ", j["version"].dump(), " (expected ", kFormatVersion, ")"));
  }
  Manifest m;
  if (!j.contains("step") || !j["step"].is_number_integer()) return bad("missing integer \"step\"");
  m.step = j["step"].get<int64_t>();
  if (!j.contains("job_hash") || !j["job_hash"].is_string()) return bad("missing string \"job_hash\"");
  m.job_hash = j["job_hash"].get<std::string>();
  if (!j.contains("extra") || !j["extra"].is_object()) return bad("missing object \"extra\"");
  m.extra_json = j["extra"].dump();
  if (!j.contains("files") || !j["files"].is_object()) return bad("missing object \"files\"");
  for (const auto& [name, rec] : j["files"].items()) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return bad(absl::StrCat("bad file name \"", name, "\""));
    }
    if (!rec.is_object() || !rec.contains("bytes") || !rec["bytes"].is_number_unsigned() || !rec.contains("sha256") ||
        !rec["sha256"].is_string() || rec["sha256"].get<std::string>().size() != 64) {
      return bad(absl::StrCat("files.", name, " needs unsigned \"bytes\" and 64-hex-digit \"sha256\""));
    }
    m.files[name] = FileRecord{rec["bytes"].get<uint64_t>(), rec["sha256"].get<std::string>()};
  }
  for (const char* required : {kLoraFile, kOptimizerFile}) {
    if (!m.files.count(required)) return bad(absl::StrCat("files lacks ", required));
  }
  return m;
}

// Parses state.json of step-<step> and checks every recorded file (sizes, plus SHA-256 for kFull).
absl::StatusOr<Manifest> VerifyCheckpointDir(const std::string& dir, int64_t step, Verify verify) {
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  if (m.step != step) {
    return absl::DataLossError(
        absl::StrCat(JoinPath(dir, kStateFile), ": records step ", m.step, " but the directory is step ", step));
  }
  for (const auto& [name, rec] : m.files) {
    const std::string path = JoinPath(dir, name);
    if (verify == Verify::kSizes) {
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) {
        return absl::DataLossError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
      }
      if (static_cast<uint64_t>(st.st_size) != rec.bytes) {
        return absl::DataLossError(absl::StrCat(path, ": size ", st.st_size, " bytes, state.json records ", rec.bytes));
      }
      continue;
    }
    auto data = ReadFile(path);
    if (!data.ok()) return absl::DataLossError(std::string(data.status().message()));
    if (data->size() != rec.bytes) {
      return absl::DataLossError(absl::StrCat(path, ": size ", data->size(), " bytes, state.json records ", rec.bytes));
    }
    std::string actual = Sha256Hex(*data);
    if (actual != rec.sha256) {
      return absl::DataLossError(absl::StrCat(path, ": sha256 ", actual, ", state.json records ", rec.sha256));
    }
  }
  return m;
}

absl::StatusOr<TrainingState> LoadVerified(const std::string& dir, int64_t step) {
  ASSIGN_OR_RETURN(Manifest m, VerifyCheckpointDir(dir, step, Verify::kFull));
  TrainingState state;
  state.step = m.step;
  state.job_hash = std::move(m.job_hash);
  state.extra_json = std::move(m.extra_json);
  auto lora = LoadAllSafetensors(JoinPath(dir, kLoraFile));
  if (!lora.ok()) return absl::DataLossError(std::string(lora.status().message()));
  auto optimizer = LoadAllSafetensors(JoinPath(dir, kOptimizerFile));
  if (!optimizer.ok()) return absl::DataLossError(std::string(optimizer.status().message()));
  state.lora = std::move(*lora);
  state.optimizer = std::move(*optimizer);
  return state;
}

// Moves the finished `tmp` directory to `final_dir`, replacing an existing checkpoint of the same step.
absl::Status InstallDir(const std::string& tmp, const std::string& final_dir, const std::string& root) {
  if (!PathExists(final_dir)) {
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return ErrnoError("cannot rename to", final_dir);
    return FsyncPath(root);
  }
  // Swap atomically so step-<N> always names a complete checkpoint; `tmp` then holds the old one.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    RETURN_IF_ERROR(FsyncPath(root));
    return RemoveAll(tmp);
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP && errno != EOPNOTSUPP) {
    return ErrnoError("cannot exchange with", final_dir);
  }
  // No RENAME_EXCHANGE on this filesystem: rename the old one aside under a leftover name. A crash between
  // the two renames loses step <N> (both copies look like leftovers) and resume falls back to an older one.
  const std::string aside = absl::StrCat(tmp, ".old");
  RETURN_IF_ERROR(RemoveAll(aside));
  if (::rename(final_dir.c_str(), aside.c_str()) != 0) return ErrnoError("cannot rename aside", final_dir);
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return ErrnoError("cannot rename to", final_dir);
  RETURN_IF_ERROR(FsyncPath(root));
  return RemoveAll(aside);
}

absl::Status Prune(const std::string& output_dir, int64_t written_step, int keep) {
  if (keep <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCheckpointSteps(output_dir));
  std::sort(steps.rbegin(), steps.rend());
  for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
    if (steps[i] == written_step) continue;
    const std::string dir = CheckpointDir(output_dir, steps[i]);
    LogInfo("removing old checkpoint ", dir, " (keep=", keep, ")");
    RETURN_IF_ERROR(RemoveAll(dir));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SerializeLora(const std::map<std::string, at::Tensor>& lora) {
  std::map<std::string, at::Tensor> fp32;
  for (const auto& entry : lora) {  // not a structured binding: clang 14 cannot capture one in the lambda below
    const std::string& key = entry.first;
    const at::Tensor& t = entry.second;
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat("LoRA tensor '", key, "' is undefined"));
    if (!at::isFloatingType(t.scalar_type())) {
      return absl::InvalidArgumentError(absl::StrCat("LoRA tensor '", key, "' has dtype ",
                                                     c10::toString(t.scalar_type()), "; expected floating point"));
    }
    RETURN_IF_ERROR(TorchCall("LoRA tensor to fp32", [&] { fp32[key] = t.detach().to(at::kFloat); }));
  }
  return SerializeSafetensors(fp32);
}

}  // namespace

std::string CheckpointDir(const std::string& output_dir, int64_t step) {
  return JoinPath(CheckpointsRoot(output_dir), absl::StrCat(kStepPrefix, step));
}

absl::Status WriteCheckpoint(const std::string& output_dir, const TrainingState& state, int keep) {
  if (state.step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", state.step, " < 0"));
  if (keep < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint keep ", keep, " < 0"));
  nlohmann::json extra = nlohmann::json::parse(state.extra_json, nullptr, /*allow_exceptions=*/false);
  if (extra.is_discarded() || !extra.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint extra_json is not a JSON object: ", state.extra_json.substr(0, 200)));
  }
  std::map<std::string, std::string> contents;
  auto lora = SerializeLora(state.lora);
  if (!lora.ok()) return Annotate(lora.status(), "checkpoint lora");
  contents[kLoraFile] = std::move(*lora);
  auto optimizer = SerializeSafetensors(state.optimizer);
  if (!optimizer.ok()) return Annotate(optimizer.status(), "checkpoint optimizer state");
  contents[kOptimizerFile] = std::move(*optimizer);

  const std::string root = CheckpointsRoot(output_dir);
  const std::string final_dir = CheckpointDir(output_dir, state.step);
  const std::string tmp = absl::StrCat(final_dir, kTempMarker, ::getpid());
  RETURN_IF_ERROR(MakeDirs(root));
  RETURN_IF_ERROR(RemoveAll(tmp));
  RETURN_IF_ERROR(MakeDirs(tmp));

  auto write_all = [&]() -> absl::Status {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [name, data] : contents) {
      RETURN_IF_ERROR(WriteFileAtomic(JoinPath(tmp, name), data));
      files[name] = {{"bytes", static_cast<uint64_t>(data.size())}, {"sha256", Sha256Hex(data)}};
    }
    nlohmann::json manifest = {{"version", kFormatVersion},
                               {"step", state.step},
                               {"job_hash", state.job_hash},
                               {"extra", extra},
                               {"files", files}};
    std::string text;
    try {
      text = manifest.dump(2);
    } catch (const std::exception& e) {  // job_hash that is not UTF-8
      return absl::InvalidArgumentError(absl::StrCat("cannot encode state.json: ", e.what()));
    }
    RETURN_IF_ERROR(WriteFileAtomic(JoinPath(tmp, kStateFile), text + "\n"));
    RETURN_IF_ERROR(FsyncPath(tmp));
    return InstallDir(tmp, final_dir, root);
  };
  absl::Status s = write_all();
  if (!s.ok()) {
    (void)RemoveAll(tmp);
    return Annotate(s, absl::StrCat("writing checkpoint ", final_dir));
  }
  return Annotate(Prune(output_dir, state.step, keep), "pruning checkpoints");
}

absl::StatusOr<TrainingState> LoadCheckpoint(const std::string& output_dir, int64_t step) {
  const std::string dir = CheckpointDir(output_dir, step);
  if (!IsDirectory(dir)) return absl::NotFoundError(absl::StrCat("no checkpoint ", dir));
  return LoadVerified(dir, step);
}

absl::StatusOr<TrainingState> LoadLatestCheckpoint(const std::string& output_dir, std::vector<std::string>* skipped) {
  const std::string root = CheckpointsRoot(output_dir);
  std::vector<int64_t> steps;
  std::vector<std::string> leftovers;
  RETURN_IF_ERROR(ForEachEntry(root, [&](const std::string& name, const std::string& path) {
    int64_t step;
    if (IsLeftoverName(name)) {
      leftovers.push_back(path);
    } else if (ParseStepDirName(name, &step) && IsDirectory(path)) {
      steps.push_back(step);
    }
  }));
  for (const std::string& path : leftovers) {
    LogWarning("removing leftover of an interrupted checkpoint write: ", path);
    RETURN_IF_ERROR(RemoveAll(path));
  }
  std::sort(steps.rbegin(), steps.rend());
  std::vector<std::string> reasons;
  for (int64_t step : steps) {
    const std::string dir = CheckpointDir(output_dir, step);
    auto state = LoadVerified(dir, step);
    if (state.ok()) {
      if (skipped != nullptr) *skipped = std::move(reasons);
      return state;
    }
    LogWarning("skipping checkpoint ", dir, ": ", state.status().message());
    reasons.push_back(absl::StrCat(kStepPrefix, step, ": ", state.status().message()));
  }
  std::string message = absl::StrCat("no complete checkpoint under ", root);
  if (!reasons.empty())
    absl::StrAppend(&message, " (", reasons.size(), " corrupt: ", absl::StrJoin(reasons, "; "), ")");
  if (skipped != nullptr) *skipped = std::move(reasons);
  return absl::NotFoundError(message);
}

absl::StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& output_dir) {
  std::vector<int64_t> steps;
  RETURN_IF_ERROR(ForEachEntry(CheckpointsRoot(output_dir), [&](const std::string& name, const std::string& path) {
    int64_t step;
    if (ParseStepDirName(name, &step) && IsDirectory(path) && VerifyCheckpointDir(path, step, Verify::kSizes).ok()) {
      steps.push_back(step);
    }
  }));
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace baton
