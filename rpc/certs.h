// Certificates for Baton's mutual TLS, made with OpenSSL's libcrypto: a CA, and certificates it signs that
// are usable as TLS server and client at once (every Baton process both serves and calls its peers). Keys
// are EC P-256, signatures ECDSA-SHA256. Used by `baton certs` and by the coordinator's embedded mode (an
// ephemeral CA for its local workers).
#pragma once

#include <absl/status/statusor.h>
#include <absl/time/time.h>

#include <string>
#include <vector>

namespace baton {

struct PemPair {
  std::string cert;  // PEM "CERTIFICATE"
  std::string key;   // PEM "PRIVATE KEY" (PKCS#8, unencrypted)
};

// A self-signed CA certificate (basicConstraints CA:TRUE, keyCertSign) valid from now for `validity`.
absl::StatusOr<PemPair> MakeCertificateAuthority(const std::string& common_name, absl::Duration validity);

// A leaf certificate signed by `ca`: subjectAltName = `hosts` (each an IP literal → IP entry, else DNS entry;
// the first is the common name), extendedKeyUsage serverAuth + clientAuth.
absl::StatusOr<PemPair> IssueCertificate(const PemPair& ca, const std::vector<std::string>& hosts,
                                         absl::Duration validity);

// OK when `cert_pem` is a certificate and `key_pem` its private key; InvalidArgument saying which part is wrong
// otherwise (a swapped or mismatched pair would fail later as an opaque handshake or listen error).
absl::Status CheckKeyMatchesCertificate(const std::string& cert_pem, const std::string& key_pem);

// `bytes` random bytes (OpenSSL's CSPRNG) as lowercase hex: bearer tokens.
absl::StatusOr<std::string> RandomHexToken(int bytes = 32);

// Writes `data` to `path` with permissions `mode` (created or replaced; the mode is set before any byte).
absl::Status WritePrivateFile(const std::string& path, const std::string& data, int mode);

}  // namespace baton
