#include "stage_driver/local_tls.h"

#include <absl/base/thread_annotations.h>
#include <absl/strings/str_cat.h>
#include <absl/synchronization/mutex.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/util/files.h"
#include "core/util/status.h"
#include "rpc/certs.h"
#include "rpc/tls.h"

namespace baton {
namespace {

constexpr char kDirPrefix[] = "baton-tls-";
constexpr char kLockFile[] = "lock";  // flock'ed by the owner for its lifetime: the kernel lets go when it dies

// Removes an ephemeral folder with plain unlink/rmdir of the files MakeEphemeralTls writes, never std::filesystem:
// libtorch 2.11 exports its own std::filesystem, and its remove_all called from a static destructor jumped to a null
// pointer on the first GPU machine (a driver's exit -11).
void RemoveTlsDir(const std::string& path) {
  for (const char* file : {kTlsCaFile, kTlsCertFile, kTlsKeyFile, kLockFile}) ::unlink(JoinPath(path, file).c_str());
  ::rmdir(path.c_str());
}

// The ephemeral folder; its destructor (at process exit) removes it. A process killed before (SIGKILL, the OOM
// killer) leaves it behind, with its lock released: the next process's SweepStaleTlsDirs removes it.
struct EphemeralDir {
  std::string path;
  int lock_fd = -1;
  ~EphemeralDir() {
    if (path.empty()) return;
    RemoveTlsDir(path);
    if (lock_fd >= 0) ::close(lock_fd);
  }
};

// Opens `dir`'s lock file (`create`: making it) and takes it: blocking, or failing at once when held (`wait` false).
// Returns the descriptor, or -1 (no lock file, or held by a live owner). Not inherited by the workers we start.
int LockTlsDir(const std::string& dir, bool create, bool wait) {
  const int fd =
      ::open(JoinPath(dir, kLockFile).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Also makes LocalWorkerSecurityArgs' look-then-set of the process security one step.
ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);
std::unique_ptr<EphemeralDir> g_dir ABSL_GUARDED_BY(g_mu);  // set once

absl::StatusOr<std::string> MakeEphemeralTls() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  const char* tmp_env = std::getenv("TMPDIR");
  const std::string tmp = tmp_env != nullptr && *tmp_env != '\0' ? tmp_env : "/tmp";
  SweepStaleTlsDirs(tmp);
  std::string templ = JoinPath(tmp, absl::StrCat(kDirPrefix, "XXXXXX"));
  if (::mkdtemp(templ.data()) == nullptr) {  // mkdtemp makes it 0700
    return absl::InternalError(absl::StrCat("cannot make a private folder for the local workers' certificates (", templ,
                                            "): ", std::strerror(errno)));
  }
  auto dir = std::make_unique<EphemeralDir>();
  dir->path = templ;
  // Locked before the key is written: a sweeper that takes the lock first sees no key and lets go (we wait for it).
  dir->lock_fd = LockTlsDir(templ, /*create=*/true, /*wait=*/true);
  if (dir->lock_fd < 0) {
    return absl::InternalError(absl::StrCat("cannot lock ", JoinPath(templ, kLockFile), ": ", std::strerror(errno)));
  }
  ASSIGN_OR_RETURN(PemPair ca, MakeCertificateAuthority("Baton ephemeral CA", absl::Hours(24 * 30)));
  ASSIGN_OR_RETURN(PemPair leaf, IssueCertificate(ca, {"127.0.0.1", "localhost", "::1"}, absl::Hours(24 * 30)));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(templ, kTlsCaFile), ca.cert, 0600));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(templ, kTlsCertFile), leaf.cert, 0600));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(templ, kTlsKeyFile), leaf.key, 0600));
  g_dir = std::move(dir);  // the CA key is never written: nothing else can be signed with it
  return templ;
}

}  // namespace

int SweepStaleTlsDirs(const std::string& tmp_dir) {
  DIR* listing = ::opendir(tmp_dir.c_str());
  if (listing == nullptr) return 0;
  std::vector<std::string> candidates;
  while (const dirent* entry = ::readdir(listing)) {
    if (std::strncmp(entry->d_name, kDirPrefix, sizeof(kDirPrefix) - 1) == 0) candidates.push_back(entry->d_name);
  }
  ::closedir(listing);
  int removed = 0;
  for (const std::string& name : candidates) {
    const std::string path = JoinPath(tmp_dir, name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    const int fd = LockTlsDir(path, /*create=*/false, /*wait=*/false);
    if (fd < 0) continue;  // a live owner's, or one older than the lock (left alone)
    struct stat key;
    const bool complete = ::stat(JoinPath(path, kTlsKeyFile).c_str(), &key) == 0;
    if (complete) {
      RemoveTlsDir(path);
      ++removed;
    }
    ::close(fd);  // an incomplete one is an owner's between its lock file and its lock: it waits for us
  }
  return removed;
}

absl::StatusOr<std::vector<std::string>> LocalWorkerSecurityArgs() {
  absl::MutexLock lock(&g_mu);
  if (auto security = GetProcessSecurity()) return SecurityArgs(*security);
  ASSIGN_OR_RETURN(std::string dir, MakeEphemeralTls());
  ASSIGN_OR_RETURN(ProcessSecurity security, LoadTlsDir(dir));
  SetProcessSecurity(security);
  return SecurityArgs(security);
}

absl::Status RequireRemoteWorkerSecurity() {
  if (GetProcessSecurity()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "--workers: pass --tls_dir DIR (this process's certificate and the CA of the workers', see `baton certs`) "
      "or --insecure (plaintext)");
}

std::string EphemeralTlsDir() {
  absl::MutexLock lock(&g_mu);
  return g_dir ? g_dir->path : "";
}

}  // namespace baton
