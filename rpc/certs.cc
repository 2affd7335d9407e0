#include "rpc/certs.h"

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace baton {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PKey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

absl::Status OpenSslError(const std::string& what) {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return absl::InternalError(absl::StrCat("OpenSSL: ", what, ": ", buf));
}

std::string BioString(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, n > 0 ? n : 0);
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)) return OpenSslError("key PEM");
  return BioString(bio.get());
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509(bio.get(), cert)) return OpenSslError("certificate PEM");
  return BioString(bio.get());
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(absl::StrCat("extension ", OBJ_nid2sn(nid), " = ", value));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok ? absl::OkStatus() : OpenSslError("add extension");
}

// A certificate for `key` named `cn`, valid from now for `validity`, with a random 128-bit serial; unsigned.
absl::StatusOr<Cert> NewCertificate(EVP_PKEY* key, const std::string& cn, absl::Duration validity) {
  Cert cert(X509_new());
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return OpenSslError("serial");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  const bool ok = X509_set_version(cert.get(), 2) && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) &&
                  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60) &&
                  X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(validity)) &&
                  X509_set_pubkey(cert.get(), key);
  BN_free(bn);
  if (!ok) return OpenSslError("certificate fields");
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (!X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("Baton"), -1, -1,
                                  0) ||
      !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                  0)) {
    return OpenSslError(absl::StrCat("subject CN=", cn));
  }
  return cert;
}

absl::StatusOr<PKey> NewKey() {
  PKey key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslError("EC P-256 key");
  return key;
}

absl::StatusOr<PKey> ReadKey(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PKey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return OpenSslError("CA key");
  return key;
}

absl::StatusOr<Cert> ReadCert(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return OpenSslError("CA certificate");
  return cert;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// The certificate and its key as PEM text.
absl::StatusOr<PemPair> ToPemPair(X509* cert, EVP_PKEY* key) {
  auto cert_pem = CertPem(cert);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = KeyPem(key);
  if (!key_pem.ok()) return key_pem.status();
  return PemPair{std::move(*cert_pem), std::move(*key_pem)};
}

}  // namespace

absl::StatusOr<PemPair> MakeCertificateAuthority(const std::string& common_name, absl::Duration validity) {
  auto key = NewKey();
  if (!key.ok()) return key.status();
  auto cert = NewCertificate(key->get(), common_name, validity);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  if (!X509_set_issuer_name(c, X509_get_subject_name(c))) return OpenSslError("issuer");
  for (const auto& [nid, value] : {std::pair<int, std::string>{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                   {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                   {NID_subject_key_identifier, "hash"}}) {
    absl::Status s = AddExtension(c, c, nid, value);
    if (!s.ok()) return s;
  }
  if (!X509_sign(c, key->get(), EVP_sha256())) return OpenSslError("sign CA");
  return ToPemPair(c, key->get());
}

absl::StatusOr<PemPair> IssueCertificate(const PemPair& ca, const std::vector<std::string>& hosts,
                                         absl::Duration validity) {
  if (hosts.empty()) return absl::InvalidArgumentError("a certificate needs at least one host name or IP");
  auto ca_key = ReadKey(ca.key);
  if (!ca_key.ok()) return ca_key.status();
  auto ca_cert = ReadCert(ca.cert);
  if (!ca_cert.ok()) return ca_cert.status();
  auto key = NewKey();
  if (!key.ok()) return key.status();
  auto cert = NewCertificate(key->get(), hosts.front(), validity);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  if (!X509_set_issuer_name(c, X509_get_subject_name(ca_cert->get()))) return OpenSslError("issuer");
  std::vector<std::string> sans;
  for (const std::string& h : hosts) sans.push_back(absl::StrCat(IsIpLiteral(h) ? "IP:" : "DNS:", h));
  for (const auto& [nid, value] : {std::pair<int, std::string>{NID_basic_constraints, "critical,CA:FALSE"},
                                   {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                                   {NID_ext_key_usage, "serverAuth,clientAuth"},
                                   {NID_subject_alt_name, absl::StrJoin(sans, ",")},
                                   {NID_authority_key_identifier, "keyid"}}) {
    absl::Status s = AddExtension(c, ca_cert->get(), nid, value);
    if (!s.ok()) return s;
  }
  if (!X509_sign(c, ca_key->get(), EVP_sha256())) return OpenSslError("sign certificate");
  return ToPemPair(c, key->get());
}

absl::Status CheckKeyMatchesCertificate(const std::string& cert_pem, const std::string& key_pem) {
  auto cert = ReadCert(cert_pem);
  if (!cert.ok()) return absl::InvalidArgumentError("not a PEM certificate");
  auto key = ReadKey(key_pem);
  if (!key.ok()) return absl::InvalidArgumentError("not a PEM private key");
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the key does not belong to the certificate");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RandomHexToken(int bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), bytes) != 1) return OpenSslError("random token");
  return absl::BytesToHexString(raw);
}

absl::Status WritePrivateFile(const std::string& path, const std::string& data, int mode) {
  ::unlink(path.c_str());  // O_CREAT keeps an existing file's mode: start fresh
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
    }
    done += n;
  }
  ::fchmod(fd, mode);  // the umask may have narrowed it: exactly `mode`
  return ::close(fd) == 0 ? absl::OkStatus()
                          : absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
}

}  // namespace baton
