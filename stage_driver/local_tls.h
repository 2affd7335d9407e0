// Transport security towards the stage workers a process drives (rpc/tls.h has the mechanics). Local workers need
// no flags: once per process an ephemeral CA and a 127.0.0.1/localhost certificate are made in a private (0700)
// temporary folder (removed at exit; one a killed process left is removed by the next) and the workers talk mutual
// TLS with it. Remote workers (--workers) need the
// process's own security (--tls_dir or --insecure): it did not start them, so it cannot know their CA.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <string>
#include <vector>

namespace baton {

// Embedded mode: the arguments that give a local stage worker our identity: the process's security when it has one
// (--tls_dir: the certificate must name 127.0.0.1, as `baton certs` certificates do; --insecure: plaintext), else
// the ephemeral one, made on the first call.
absl::StatusOr<std::vector<std::string>> LocalWorkerSecurityArgs();

// --workers: FailedPrecondition unless the process's security was set (flags, or a test).
absl::Status RequireRemoteWorkerSecurity();

// Removes the ephemeral folders ("baton-tls-*", ours) in `tmp_dir` whose owner died without removing them: their
// lock file is no longer locked (the kernel releases a dead process's flock, SIGKILL included). A live owner's
// folder, one without a lock file (older Batons) and anything not ours stay. Returns how many went. Called by the
// first LocalWorkerSecurityArgs of a process.
int SweepStaleTlsDirs(const std::string& tmp_dir);

// The ephemeral folder of this process ("" before LocalWorkerSecurityArgs made it). Tests.
std::string EphemeralTlsDir();

}  // namespace baton
