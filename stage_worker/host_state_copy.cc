#include "stage_worker/host_state_copy.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/tensor/safetensors.h"
#include "core/train/optimizer.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr char kPidKey[] = "pid";  // the writer's, in the copy's metadata
constexpr char kFilePrefix[] = "baton-state-";
constexpr char kSpareSuffix[] = ".spare";  // the copy before the current one, written over next
constexpr std::chrono::minutes kAbandonedAfter{30};

// [A-Za-z0-9_.-] kept, anything else '_': ids come from the coordinator, names must stay in the folder.
std::string FileSafe(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

// All of `data` to `fd`; false with errno set (0: the write wrote nothing).
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The file `layout` lays out, written over `spare` (the copy before the current one: its pages are already the
// process's, so the write faults none in) and then exchanged with `path` in one rename: a reader finds the old copy
// or the new one, never half of one, and a kill during the write leaves the current copy whole. Each tensor is
// written from its own memory. No fsync: the copy outlives the process, not the host.
absl::Status WriteReplacing(const std::string& path, const std::string& spare, const SafetensorsLayout& layout) {
  const int fd = ::open(spare.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", spare, ": ", std::strerror(errno)));
  bool ok = WriteAll(fd, layout.head.data(), layout.head.size());
  for (size_t i = 0; ok && i < layout.data.size(); ++i) {
    const at::Tensor& t = layout.data[i];
    ok = WriteAll(fd, static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * t.element_size());
  }
  ok = ok && ::ftruncate(fd, static_cast<off_t>(layout.head.size() + layout.data_bytes)) == 0;
  if (!ok) {
    const std::string why = errno != 0 ? std::strerror(errno) : "wrote nothing";
    ::close(fd);
    ::unlink(spare.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot write ", spare, ": ", why));
  }
  ::close(fd);
  // The first copy has nothing to exchange with: it is renamed into place (and the next write makes a new spare).
  if (::renameat2(AT_FDCWD, spare.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) return absl::OkStatus();
  if (errno == ENOENT && ::rename(spare.c_str(), path.c_str()) == 0) return absl::OkStatus();
  const std::string why = std::strerror(errno);
  ::unlink(spare.c_str());
  return absl::InternalError(absl::StrCat("cannot put ", spare, " in the place of ", path, ": ", why));
}

bool ProcessGone(int64_t pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// The pid a copy (or its spare) was written by; 0: unknown (a spare torn by a kill: then its copy's).
int64_t WriterOf(const std::string& path) {
  int64_t pid = 0;
  auto file = SafetensorsFile::Open(path);
  if (!file.ok() && absl::EndsWith(path, kSpareSuffix))
    return WriterOf(path.substr(0, path.size() - (sizeof(kSpareSuffix) - 1)));
  if (!file.ok()) return 0;
  auto it = (*file)->metadata().find(kPidKey);
  return it != (*file)->metadata().end() && absl::SimpleAtoi(it->second, &pid) ? pid : 0;
}

}  // namespace

std::string HostStateCopyDir() {
  const char* dir = std::getenv("BATON_STATE_COPY_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/dev/shm";
}

void HostStateCopy::Use(const std::string& job_id, const std::string& run_id, int stage) {
  const std::string prefix = absl::StrCat(kFilePrefix, FileSafe(job_id), "-");
  const std::string suffix = absl::StrCat("-s", stage, ".safetensors");
  const std::string path = JoinPath(HostStateCopyDir(), absl::StrCat(prefix, FileSafe(run_id), suffix));
  if (path == path_) return;
  Drop();
  std::error_code ec;
  if (!std::filesystem::is_directory(HostStateCopyDir(), ec)) {
    LogWarning("no folder ", HostStateCopyDir(),
               " for the host copy of this stage's state (set BATON_STATE_COPY_DIR): ",
               "a restarted worker takes the state from the coordinator's copy");
    return;
  }
  path_ = path;
  writes_ = 0;
  // Orphans are this job's copies of this stage whatever the run: on shared stage workers a run's id is "<job
  // hash>-<run suffix>" (coordinator/pipeline_trainer.cc), and the run resumed after a killed job service has another.
  DeleteOrphans(absl::StrCat(kFilePrefix, FileSafe(job_id.substr(0, job_id.find('-'))), "-"), suffix);
}

void HostStateCopy::DeleteOrphans(const std::string& prefix, const std::string& suffix) const {
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& entry : std::filesystem::directory_iterator(HostStateCopyDir(), ec)) {
    const std::string name = entry.path().filename().string();
    const std::string path = entry.path().string();
    if (!absl::StartsWith(name, kFilePrefix) || path == path_ || path == SparePath()) continue;
    // Another run's copy of this stage of this job was left by a run that is gone; any other copy, once no worker
    // took it back for longer than a lost worker gets to come back (a run that failed or was abandoned). A file
    // whose writer cannot be told (a spare torn by a kill, its copy gone) counts as gone once abandoned.
    const bool this_stage = absl::StartsWith(name, prefix) && absl::StrContains(name, suffix);
    const auto written = std::filesystem::last_write_time(entry.path(), ec);
    const bool abandoned = !ec && now - written > kAbandonedAfter;
    const int64_t writer = WriterOf(path);
    const bool gone = writer > 0 ? ProcessGone(writer) : abandoned;
    if (!(this_stage || abandoned) || !gone) continue;
    if (std::filesystem::remove(entry.path(), ec)) LogInfo("deleted the host copy of a run that is gone: ", path);
  }
}

void HostStateCopy::Drop() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove(path_, ec);
  std::filesystem::remove(SparePath(), ec);
  path_.clear();
}

absl::StatusOr<double> HostStateCopy::Write(const Tensors& state) {
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(SafetensorsLayout layout, LayOutSafetensors(state, {{kPidKey, absl::StrCat(::getpid())}}));
  RETURN_IF_ERROR(WriteReplacing(path_, SparePath(), layout));
  ++writes_;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::optional<HostStateCopy::Tensors> HostStateCopy::Take(int64_t steps) const {
  std::error_code ec;
  if (path_.empty()) return std::nullopt;
  if (!std::filesystem::exists(path_, ec)) {
    LogInfo("no host copy ", path_, " to take the state of step ", steps, " from");
    return std::nullopt;
  }
  absl::StatusOr<Tensors> state = LoadAllSafetensors(path_);
  if (!state.ok() || !state->count(kOptimizerStepKey)) {
    LogWarning("the host copy ", path_, " is unreadable: ", state.ok() ? "no step count" : state.status().message());
    return std::nullopt;
  }
  if (const int64_t held = state->at(kOptimizerStepKey).item<int64_t>(); held != steps) {
    LogInfo("the host copy ", path_, " holds the state of step ", held, ", not ", steps, ": not taken");
    return std::nullopt;
  }
  return std::move(*state);
}

}  // namespace baton
