#include "rpc/tls_flags.h"

#include <absl/flags/flag.h>

#include <cstdio>

ABSL_FLAG(std::string, tls_dir, "",
          "folder with ca.crt, tls.crt, tls.key for mutual TLS (make it with `baton certs --out DIR --hosts ...`)");
ABSL_FLAG(std::string, tls_ca, "", "CA certificate (PEM) that signs every Baton peer (default: <tls_dir>/ca.crt)");
ABSL_FLAG(std::string, tls_cert, "", "this process's certificate (PEM) (default: <tls_dir>/tls.crt)");
ABSL_FLAG(std::string, tls_key, "", "this process's private key (PEM) (default: <tls_dir>/tls.key)");
ABSL_FLAG(bool, insecure, false,
          "plaintext gRPC without authentication: anyone who can reach the ports controls the processes");

namespace baton {

TlsFlagValues TlsFlagsFromCommandLine() {
  TlsFlagValues flags;
  flags.dir = absl::GetFlag(FLAGS_tls_dir);
  flags.ca = absl::GetFlag(FLAGS_tls_ca);
  flags.cert = absl::GetFlag(FLAGS_tls_cert);
  flags.key = absl::GetFlag(FLAGS_tls_key);
  flags.insecure = absl::GetFlag(FLAGS_insecure);
  return flags;
}

absl::StatusOr<ProcessSecurity> InstallSecurityFromFlags(const std::string& program, bool warn_insecure) {
  auto security = LoadProcessSecurity(TlsFlagsFromCommandLine(), program);
  if (!security.ok()) return security.status();
  SetProcessSecurity(*security);
  if (security->insecure && warn_insecure) {
    std::fprintf(stderr, "%s: WARNING: --insecure: plaintext gRPC without authentication to and from every peer\n",
                 program.c_str());
  }
  return security;
}

}  // namespace baton
