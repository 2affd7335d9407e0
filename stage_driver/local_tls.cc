#include "stage_driver/local_tls.h"

#include <absl/base/thread_annotations.h>
#include <absl/strings/str_cat.h>
#include <absl/synchronization/mutex.h>
#include <stdlib.h>
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

// The ephemeral folder; its destructor (at process exit) removes it with plain unlink/rmdir of the three files
// MakeEphemeralTls writes, never std::filesystem: libtorch 2.11 exports its own std::filesystem, and its remove_all
// called from a static destructor jumped to a null pointer on the first GPU machine (a driver's exit -11).
struct EphemeralDir {
  std::string path;
  ~EphemeralDir() {
    if (path.empty()) return;
    for (const char* file : {kTlsCaFile, kTlsCertFile, kTlsKeyFile}) ::unlink(JoinPath(path, file).c_str());
    ::rmdir(path.c_str());
  }
};

// Also makes LocalWorkerSecurityArgs' look-then-set of the process security one step.
ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);
std::unique_ptr<EphemeralDir> g_dir ABSL_GUARDED_BY(g_mu);  // set once

absl::StatusOr<std::string> MakeEphemeralTls() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = JoinPath(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "baton-tls-XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) {  // mkdtemp makes it 0700
    return absl::InternalError(absl::StrCat("cannot make a private folder for the local workers' certificates (", templ,
                                            "): ", std::strerror(errno)));
  }
  auto dir = std::make_unique<EphemeralDir>();
  dir->path = templ;
  ASSIGN_OR_RETURN(PemPair ca, MakeCertificateAuthority("Baton ephemeral CA", absl::Hours(24 * 30)));
  ASSIGN_OR_RETURN(PemPair leaf, IssueCertificate(ca, {"127.0.0.1", "localhost", "::1"}, absl::Hours(24 * 30)));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(templ, kTlsCaFile), ca.cert, 0600));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(templ, kTlsCertFile), leaf.cert, 0600));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(templ, kTlsKeyFile), leaf.key, 0600));
  g_dir = std::move(dir);  // the CA key is never written: nothing else can be signed with it
  return templ;
}

}  // namespace

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
