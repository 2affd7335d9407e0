// Transport security on the coordinator's side (rpc/tls.h has the mechanics).
//
// The embedded default (`coordinator --stages 2 --job J`, no --workers) needs no flags: once per process the
// coordinator makes an ephemeral CA and one certificate for 127.0.0.1/localhost in a private (0700) temporary
// folder, starts its local stage workers with them and talks mutual TLS to them; the folder is removed when
// the process exits. With --tls_dir or --insecure the local workers get the same files (the certificate must
// name 127.0.0.1, as `baton certs` certificates do) or plaintext. --workers, --listen and an encoder worker
// need --tls_dir or --insecure: the coordinator did not start those servers, so it cannot know their CA.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <string>
#include <vector>

namespace baton {

// main: installs the --tls_*/--insecure flags' security when any is given; when none is and `required`, the
// FailedPrecondition that says what to pass.
absl::Status InstallCoordinatorSecurity(bool required);

// Embedded mode: the arguments that give a local stage worker our identity (making the ephemeral one first if
// the process has none).
absl::StatusOr<std::vector<std::string>> LocalWorkerSecurityArgs();

// --workers: FailedPrecondition unless the process's security was set (flags, or a test).
absl::Status RequireRemoteWorkerSecurity();

// The ephemeral folder of this process ("" before LocalWorkerSecurityArgs made it). Tests.
std::string EphemeralTlsDir();

}  // namespace baton
