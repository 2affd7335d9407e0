#include "client/certs_command.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>

#include <algorithm>
#include <cstdio>

#include "core/util/files.h"
#include "core/util/status.h"
#include "rpc/certs.h"
#include "rpc/tls.h"

namespace baton {
namespace {

// Writes a --tls_dir: ca.crt, tls.crt, tls.key (0600), and `token` when not empty.
absl::Status WriteTlsDir(const std::string& dir, const PemPair& ca, const PemPair& leaf, const std::string& token) {
  RETURN_IF_ERROR(MakeDirs(dir));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(dir, kTlsCaFile), ca.cert, 0644));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(dir, kTlsCertFile), leaf.cert, 0644));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(dir, kTlsKeyFile), leaf.key, 0600));
  if (!token.empty()) RETURN_IF_ERROR(WritePrivateFile(JoinPath(dir, kTokenFile), token + "\n", 0600));
  std::printf("wrote %s/{%s,%s,%s%s}\n", dir.c_str(), kTlsCaFile, kTlsCertFile, kTlsKeyFile,
              token.empty() ? "" : ",token");
  return absl::OkStatus();
}

absl::Status Certs(const Args& args) {
  const std::string out = args.Get("out");
  std::vector<std::string> hosts = absl::StrSplit(args.Get("hosts"), ',', absl::SkipWhitespace());
  if (hosts.empty()) return absl::InvalidArgumentError("--hosts: list at least one host name or IP");
  for (const std::string& h : hosts) {
    for (absl::string_view name : absl::StrSplit(h, '+')) {
      if (name.empty() || name.find_first_of("/*") != absl::string_view::npos || name == "." || name == ".." ||
          name == "client") {
        return absl::InvalidArgumentError(absl::StrCat("--hosts: '", name,
                                                       "' is not a host name or IP (no wildcards: gRPC matches them "
                                                       "only over two labels; list the names, joined by +)"));
      }
    }
  }
  ASSIGN_OR_RETURN(int64_t days, args.GetInt("days"));
  if (days < 1) return absl::InvalidArgumentError("--days must be at least 1");
  if (PathExists(JoinPath(out, "ca.crt")) || PathExists(JoinPath(out, "ca.key"))) {
    return absl::AlreadyExistsError(absl::StrCat(out,
                                                 " already holds a CA (ca.crt/ca.key): a new one would invalidate "
                                                 "every certificate it signed; choose another --out or remove it"));
  }
  const absl::Duration validity = absl::Hours(24 * days);
  RETURN_IF_ERROR(MakeDirs(out));
  ASSIGN_OR_RETURN(PemPair ca, MakeCertificateAuthority("Baton CA", validity));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(out, "ca.crt"), ca.cert, 0644));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(out, "ca.key"), ca.key, 0600));
  std::printf("wrote %s/ca.crt and %s/ca.key (0600; keep it offline: it signs new certificates)\n", out.c_str(),
              out.c_str());
  ASSIGN_OR_RETURN(std::string token, RandomHexToken(32));
  RETURN_IF_ERROR(WritePrivateFile(JoinPath(out, kTokenFile), token + "\n", 0600));
  std::printf("wrote %s/token (0600): the job service's bearer token\n", out.c_str());
  for (const std::string& h : hosts) {
    std::vector<std::string> names = absl::StrSplit(h, '+');  // a+b: one certificate for several names
    for (const char* local : {"localhost", "127.0.0.1", "::1"}) {
      if (std::find(names.begin(), names.end(), local) == names.end()) names.push_back(local);
    }
    ASSIGN_OR_RETURN(PemPair leaf, IssueCertificate(ca, names, validity));
    RETURN_IF_ERROR(WriteTlsDir(JoinPath(out, names.front()), ca, leaf, ""));
  }
  ASSIGN_OR_RETURN(PemPair client, IssueCertificate(ca, {"baton-client"}, validity));
  RETURN_IF_ERROR(WriteTlsDir(JoinPath(out, "client"), ca, client, token));
  std::printf(
      "valid %lld days, EC P-256. Copy DIR/<host>/ to each host, then:\n"
      "  stage_worker   --listen HOST:PORT --tls_dir %s/HOST    (encoder_worker --listen the same)\n"
      "  coordinator    --tls_dir %s/HOST --workers HOST:PORT,...   [--listen HOST:PORT --token_file %s/token]\n"
      "  baton          list --coordinator HOST:PORT --tls-dir %s/client    (or --tls-ca + --token-file / "
      "$BATON_TOKEN)\n",
      static_cast<long long>(days), out.c_str(), out.c_str(), out.c_str(), out.c_str());
  return absl::OkStatus();
}

}  // namespace

Command CertsCommand() {
  return {"certs",
          "Make a CA, a certificate per host (TLS server and client), a client certificate and a bearer token for "
          "mutual TLS between coordinator and workers and the job service's token (see deploy/README.md).",
          {{"out", "folder to write (refuses one that already holds a CA)", "", true},
           {"hosts",
            "comma-separated host names or IPs, one certificate each (DIR/<host>/); a+b+c: one certificate for "
            "several names (DIR/a/), e.g. a StatefulSet's pods",
            "", true},
           {"days", "validity in days", "365"}},
          Certs};
}

}  // namespace baton
