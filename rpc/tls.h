// The one place that turns security settings into gRPC credentials. Each process has one identity; its main
// sets it (SetProcessSecurity) before it serves or calls anyone, and the servers and clients it builds read it
// from here.
#pragma once

#include <absl/status/statusor.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace baton {

// Peers (coordinator ↔ stage workers ↔ stage workers, coordinator ↔ encoder worker) use mutual TLS: every
// server requires and verifies a client certificate from our CA, every client verifies the server's. The
// files come from --tls_dir DIR (DIR/ca.crt, DIR/tls.crt, DIR/tls.key, as `baton certs` writes them; the
// names of a Kubernetes TLS Secret) or --tls_ca/--tls_cert/--tls_key; --insecure is plaintext, said so on
// stderr at start. The client API (JobService) is TLS with server authentication only plus a bearer token
// (`authorization: Bearer <token>`), checked for every call by TokenAuthProcessor.

// File names inside a --tls_dir.
inline constexpr char kTlsCaFile[] = "ca.crt";
inline constexpr char kTlsCertFile[] = "tls.crt";
inline constexpr char kTlsKeyFile[] = "tls.key";
inline constexpr char kTokenFile[] = "token";

// What the --tls_* / --insecure flags said.
struct TlsFlagValues {
  std::string dir, ca, cert, key;  // --tls_dir; --tls_ca/--tls_cert/--tls_key override the dir's files
  bool insecure = false;
};

struct ProcessSecurity {
  bool insecure = false;
  std::string ca_file, cert_file, key_file;  // as given, so local workers can be started with the same files
  std::string ca_pem, cert_pem, key_pem;
};

// Reads the files the flags name. Neither TLS files nor --insecure: FailedPrecondition that says what to pass
// (`program` names the binary in it); --insecure with TLS files, a missing or unreadable file, a key that is
// not PEM: InvalidArgument naming the file.
// `require_identity` false (clients such as `baton`): the certificate and key are optional (a --tls_dir without
// tls.crt/tls.key is fine; the job service asks for none, stage workers do).
absl::StatusOr<ProcessSecurity> LoadProcessSecurity(const TlsFlagValues& flags, const std::string& program,
                                                    bool require_identity = true);
// A ProcessSecurity from PEM files in `dir` (kTlsCaFile, kTlsCertFile, kTlsKeyFile).
absl::StatusOr<ProcessSecurity> LoadTlsDir(const std::string& dir);
ProcessSecurity InsecureSecurity();

// The process's identity; unset until a main (or the coordinator's embedded mode) sets it.
void SetProcessSecurity(const ProcessSecurity& security);
std::optional<ProcessSecurity> GetProcessSecurity();
void ClearProcessSecurity();  // tests

// Mutual TLS (require and verify a client certificate from our CA), or plaintext when insecure.
std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const ProcessSecurity& security);
// Client side of PeerServerCredentials: our CA verifies the server, our certificate identifies us.
std::shared_ptr<grpc::ChannelCredentials> PeerChannelCredentials(const ProcessSecurity& security);
// The process's peer credentials: PeerChannelCredentials(GetProcessSecurity()), plaintext while unset (a
// plaintext client cannot reach a TLS server, so unset never weakens a server).
std::shared_ptr<grpc::ChannelCredentials> ProcessChannelCredentials();
// The process's mTLS server credentials; FailedPrecondition while unset.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ProcessServerCredentials();

// Client API server: TLS without client certificates, every call checked for `token` (constant-time compare).
// Plaintext (and no token check) when insecure.
std::shared_ptr<grpc::ServerCredentials> TokenServerCredentials(const ProcessSecurity& security,
                                                                const std::string& token);
// A client (`baton`): plaintext when insecure; else verifies the server with security.ca_pem, presents
// security's certificate when it has one (stage and encoder workers require it), and sends
// `authorization: Bearer <token>` when `token` is not empty (the job service requires it).
std::shared_ptr<grpc::ChannelCredentials> ClientChannelCredentials(const ProcessSecurity& security,
                                                                   const std::string& token);

// Rejects (UNAUTHENTICATED) every call whose `authorization` metadata is not `Bearer <token>`.
class TokenAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuthProcessor(std::string token) : token_(std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata, OutputMetadata* response_metadata) override;

 private:
  std::string token_;
};

// Equal bytes, in time that depends only on the lengths.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// Reads a token file: its content without surrounding whitespace; empty or unreadable is an error naming it.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Command-line arguments that give a child process the same identity (--insecure, or --tls_ca/--tls_cert/--tls_key).
std::vector<std::string> SecurityArgs(const ProcessSecurity& security);

// Prints the warning line(s) on stderr when `listen` is served in plaintext ("<program>: WARNING: ...").
void WarnIfPlaintext(const std::string& program, const std::string& listen, const ProcessSecurity& security);

// True when `host_port`'s host is a loopback address or name (127.x, ::1, localhost).
bool IsLoopbackListen(const std::string& host_port);

}  // namespace baton
