#include "rpc/tls.h"

#include <absl/base/thread_annotations.h>
#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/synchronization/mutex.h>
#include <grpcpp/security/server_credentials.h>

#include <cstdio>

#include "core/util/files.h"
#include "rpc/certs.h"

namespace baton {
namespace {

ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);
std::optional<ProcessSecurity> g_security ABSL_GUARDED_BY(g_mu);

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  auto pem = ReadFile(path);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the TLS ", what, " ", path, ": ", pem.status().message()));
  }
  if (!absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat("the TLS ", what, " ", path, " is not a PEM file"));
  }
  return pem;
}

}  // namespace

ProcessSecurity InsecureSecurity() {
  ProcessSecurity s;
  s.insecure = true;
  return s;
}

absl::StatusOr<ProcessSecurity> LoadTlsDir(const std::string& dir) {
  TlsFlagValues flags;
  flags.dir = dir;
  return LoadProcessSecurity(flags, "baton");
}

absl::StatusOr<ProcessSecurity> LoadProcessSecurity(const TlsFlagValues& flags, const std::string& program,
                                                    bool require_identity) {
  const bool tls = !flags.dir.empty() || !flags.ca.empty() || !flags.cert.empty() || !flags.key.empty();
  if (tls && flags.insecure) {
    return absl::InvalidArgumentError(absl::StrCat(program, ": --insecure and --tls_* exclude each other"));
  }
  if (flags.insecure) return InsecureSecurity();
  if (!tls) {
    return absl::FailedPreconditionError(absl::StrCat(
        program,
        ": no transport security given: pass --tls_dir DIR (ca.crt, tls.crt, tls.key; make them with `baton certs "
        "--out DIR --hosts HOST,...`) or --tls_ca/--tls_cert/--tls_key, or --insecure for plaintext on a trusted "
        "network"));
  }
  ProcessSecurity s;
  auto pick = [&](const std::string& flag, const char* name) {
    return !flag.empty() ? flag : flags.dir.empty() ? std::string() : JoinPath(flags.dir, name);
  };
  s.ca_file = pick(flags.ca, kTlsCaFile);
  s.cert_file = pick(flags.cert, kTlsCertFile);
  s.key_file = pick(flags.key, kTlsKeyFile);
  if (!require_identity && flags.cert.empty() && flags.key.empty() && !PathExists(s.cert_file)) {
    s.cert_file.clear();  // a client folder with only ca.crt (and token)
    s.key_file.clear();
  }
  for (const auto& [file, flag] : {std::pair<std::string, const char*>{s.ca_file, "--tls_ca"},
                                   {s.cert_file, "--tls_cert"},
                                   {s.key_file, "--tls_key"}}) {
    if (file.empty() &&
        (require_identity || flag == std::string("--tls_ca") || !s.cert_file.empty() || !s.key_file.empty())) {
      return absl::InvalidArgumentError(absl::StrCat(program, ": ", flag, " (or --tls_dir) is required with TLS"));
    }
  }
  auto ca = ReadPem(s.ca_file, "CA certificate");
  if (!ca.ok()) return ca.status();
  s.ca_pem = std::move(*ca);
  if (s.cert_file.empty()) return s;
  auto cert = ReadPem(s.cert_file, "certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(s.key_file, "key");
  if (!key.ok()) return key.status();
  s.cert_pem = std::move(*cert);
  s.key_pem = std::move(*key);
  if (absl::Status match = CheckKeyMatchesCertificate(s.cert_pem, s.key_pem); !match.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(program, ": ", s.cert_file, " and ", s.key_file, ": ", match.message()));
  }
  return s;
}

void SetProcessSecurity(const ProcessSecurity& security) {
  absl::MutexLock lock(&g_mu);
  g_security = security;
}

std::optional<ProcessSecurity> GetProcessSecurity() {
  absl::MutexLock lock(&g_mu);
  return g_security;
}

void ClearProcessSecurity() {
  absl::MutexLock lock(&g_mu);
  g_security.reset();
}

std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const ProcessSecurity& security) {
  if (security.insecure) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = security.ca_pem;
  options.pem_key_cert_pairs.push_back({security.key_pem, security.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> PeerChannelCredentials(const ProcessSecurity& security) {
  if (security.insecure) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = security.ca_pem;
  if (security.cert_pem.empty()) return grpc::SslCredentials(options);
  options.pem_private_key = security.key_pem;
  options.pem_cert_chain = security.cert_pem;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ProcessChannelCredentials() {
  auto security = GetProcessSecurity();
  return security ? PeerChannelCredentials(*security) : grpc::InsecureChannelCredentials();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ProcessServerCredentials() {
  auto security = GetProcessSecurity();
  if (!security) return absl::FailedPreconditionError("no transport security configured (--tls_dir or --insecure)");
  return PeerServerCredentials(*security);
}

std::shared_ptr<grpc::ServerCredentials> TokenServerCredentials(const ProcessSecurity& security,
                                                                const std::string& token) {
  if (security.insecure) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({security.key_pem, security.cert_pem});
  auto creds = grpc::SslServerCredentials(options);
  creds->SetAuthMetadataProcessor(std::make_shared<TokenAuthProcessor>(token));
  return creds;
}

std::shared_ptr<grpc::ChannelCredentials> ClientChannelCredentials(const ProcessSecurity& security,
                                                                   const std::string& token) {
  if (security.insecure) return grpc::InsecureChannelCredentials();
  auto ssl = PeerChannelCredentials(security);
  if (token.empty()) return ssl;
  return grpc::CompositeChannelCredentials(ssl, grpc::AccessTokenCredentials(token));
}

grpc::Status TokenAuthProcessor::Process(const InputMetadata& auth_metadata, grpc::AuthContext*,
                                         OutputMetadata* consumed_auth_metadata, OutputMetadata*) {
  auto it = auth_metadata.find("authorization");
  if (it == auth_metadata.end()) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        "no bearer token: pass baton --token-file FILE (or $BATON_TOKEN, or a --tls-dir holding token)");
  }
  const std::string value(it->second.data(), it->second.size());
  if (!ConstantTimeEquals(value, absl::StrCat("Bearer ", token_))) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong bearer token");
  }
  consumed_auth_metadata->insert({"authorization", value});
  return grpc::Status::OK;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  // Every byte of the longer string is looked at whatever the content; only the lengths leak.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto content = ReadFile(path);
  if (!content.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the token file ", path, ": ", content.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(*content));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("the token file ", path, " is empty"));
  return token;
}

std::vector<std::string> SecurityArgs(const ProcessSecurity& security) {
  if (security.insecure) return {"--insecure"};
  return {absl::StrCat("--tls_ca=", security.ca_file), absl::StrCat("--tls_cert=", security.cert_file),
          absl::StrCat("--tls_key=", security.key_file)};
}

bool IsLoopbackListen(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

void WarnIfPlaintext(const std::string& program, const std::string& listen, const ProcessSecurity& security) {
  if (!security.insecure) return;
  std::fprintf(stderr,
               "%s: WARNING: --insecure: serving plaintext gRPC on %s without authentication; anyone who can reach "
               "it can control this process (use --tls_dir on any network you do not fully trust)\n",
               program.c_str(), listen.c_str());
  if (!IsLoopbackListen(listen)) {
    std::fprintf(stderr, "%s: WARNING: %s is not a loopback address: other machines can reach this plaintext port\n",
                 program.c_str(), listen.c_str());
  }
}

}  // namespace baton
