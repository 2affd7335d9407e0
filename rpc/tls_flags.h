// The transport-security flags shared by coordinator, stage_worker and encoder_worker (rpc/tls.h):
//   --tls_dir DIR            DIR/ca.crt, DIR/tls.crt, DIR/tls.key (what `baton certs` writes per host)
//   --tls_ca/--tls_cert/--tls_key FILE   the same files one by one (override the dir's)
//   --insecure               plaintext gRPC without authentication (a warning on stderr at start)
#pragma once

#include <absl/status/statusor.h>

#include <string>

#include "rpc/tls.h"

namespace baton {

TlsFlagValues TlsFlagsFromCommandLine();

// Loads the flags' files and makes them the process's identity (SetProcessSecurity). With --insecure and
// `warn_insecure`, prints "<program>: WARNING: --insecure ..." on stderr. Errors as LoadProcessSecurity.
absl::StatusOr<ProcessSecurity> InstallSecurityFromFlags(const std::string& program, bool warn_insecure);

}  // namespace baton
