#include "client/client_security.h"

#include <absl/strings/str_cat.h>

#include <cstdlib>

#include "core/util/files.h"
#include "rpc/tls.h"

namespace baton {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

std::vector<FlagSpec> SecurityFlags() {
  return {{"tls-dir", "folder with ca.crt (+ tls.crt, tls.key, token), e.g. baton certs' DIR/client; env BATON_TLS_DIR",
           Env("BATON_TLS_DIR")},
          {"tls-ca", "CA certificate (PEM) that signed the server's (default: <tls-dir>/ca.crt)"},
          {"tls-cert", "client certificate (PEM), for stage/encoder workers (default: <tls-dir>/tls.crt if present)"},
          {"tls-key", "client key (PEM) (default: <tls-dir>/tls.key if present)"},
          {"token-file", "file with the job service's bearer token (default: $BATON_TOKEN, else <tls-dir>/token)"},
          {"insecure", "plaintext without a token (a server started with --insecure)", "", false, true}};
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(const Args& args, bool with_token) {
  TlsFlagValues flags;
  flags.dir = args.Get("tls-dir");
  flags.ca = args.Get("tls-ca");
  flags.cert = args.Get("tls-cert");
  flags.key = args.Get("tls-key");
  flags.insecure = args.GetBool("insecure");
  // An --insecure typed on the command line wins over a folder the environment gave (BATON_TLS_DIR, exported as
  // deploy/README.md shows): the user asked for plaintext to this server.
  if (flags.insecure && flags.dir == Env("BATON_TLS_DIR")) flags.dir.clear();
  auto security = LoadProcessSecurity(flags, "baton", /*require_identity=*/false);
  if (!security.ok()) {
    std::string message(security.status().message());
    if (absl::IsFailedPrecondition(security.status())) {
      message =
          "baton: no transport security given: pass --tls-dir DIR (ca.crt and token, e.g. baton certs' "
          "DIR/client; or env BATON_TLS_DIR), or --tls-ca FILE with --token-file FILE (or $BATON_TOKEN), or "
          "--insecure for a server started with --insecure";
    } else if (flags.insecure) {
      message = "baton: --insecure and --tls-dir, --tls-ca, --tls-cert or --tls-key exclude each other";
    }
    return absl::Status(security.status().code(), message);
  }
  std::string token;
  if (!security->insecure && with_token) {
    const std::string dir_token = flags.dir.empty() ? "" : JoinPath(flags.dir, kTokenFile);
    if (!args.Get("token-file").empty()) {
      auto t = ReadTokenFile(args.Get("token-file"));
      if (!t.ok()) return t.status();
      token = *t;
    } else if (!Env("BATON_TOKEN").empty()) {
      token = Env("BATON_TOKEN");
    } else if (!dir_token.empty() && PathExists(dir_token)) {
      auto t = ReadTokenFile(dir_token);
      if (!t.ok()) return t.status();
      token = *t;
    }
  }
  return ClientChannelCredentials(*security, token);
}

}  // namespace baton
