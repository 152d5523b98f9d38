// TlsContext on OpenSSL (libssl) through asio::ssl, and the throwaway test
// credentials on libcrypto (contract in tls.h).
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/ip/address.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "file_text.h"
#include "tls_impl.h"

// `lhs = *expr`, or return expr's error.
#define FEDRT_TLS_CONCAT_INNER(a, b) a##b
#define FEDRT_TLS_CONCAT(a, b) FEDRT_TLS_CONCAT_INNER(a, b)
#define FEDRT_ASSIGN_OR_RETURN(lhs, expr) \
  FEDRT_ASSIGN_OR_RETURN_IMPL(FEDRT_TLS_CONCAT(fedrt_result_, __LINE__), lhs, expr)
#define FEDRT_ASSIGN_OR_RETURN_IMPL(result, lhs, expr) \
  auto result = (expr);                                \
  if (!result.ok()) return result.status();            \
  lhs = std::move(*result)

namespace fedrt {
namespace transport {
namespace {

struct BioFree { void operator()(BIO* p) const { BIO_free(p); } };
struct X509Free { void operator()(X509* p) const { X509_free(p); } };
struct PkeyFree { void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); } };
struct ExtFree { void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); } };
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL's queued errors as one line (and the queue cleared).
std::string OpenSslErrors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(code, line, sizeof(line));
    if (!text.empty()) text += "; ";
    text += line;
  }
  return text.empty() ? std::string("no OpenSSL error recorded") : text;
}

// PEM files are small: anything past 1 MiB is not one.
constexpr std::size_t kMaxPemBytes = std::size_t{1} << 20;

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Every PEM certificate in the text, in order.
Result<std::vector<X509Ptr>> ParseCertificates(const std::string& text, const std::string& path,
                                               const char* what) {
  BioPtr bio = MemoryBio(text);
  std::vector<X509Ptr> certificates;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certificates.emplace_back(cert);
  ERR_clear_error();  // the read that ended the loop reports "no start line"
  if (certificates.empty()) {
    return InvalidArgument(std::string(what) + " " + path + " holds no PEM certificate");
  }
  return certificates;
}

Status LoadCertificateAndKey(SSL_CTX* ctx, const TlsConfig& config) {
  FEDRT_ASSIGN_OR_RETURN(std::string cert_text, ReadFileText(config.cert_file, "TLS certificate file", false, kMaxPemBytes));
  FEDRT_ASSIGN_OR_RETURN(std::vector<X509Ptr> chain,
                         ParseCertificates(cert_text, config.cert_file, "TLS certificate file"));
  if (SSL_CTX_use_certificate(ctx, chain[0].get()) != 1) {
    return InvalidArgument("TLS certificate file " + config.cert_file + " is not usable: " + OpenSslErrors());
  }
  for (std::size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx, chain[i].get()) != 1) {
      return InvalidArgument("TLS certificate file " + config.cert_file + ": chain certificate " +
                             std::to_string(i + 1) + " is not usable: " + OpenSslErrors());
    }
  }
  if (config.key_file.empty()) return InvalidArgument("a TLS certificate needs its key file");
  FEDRT_ASSIGN_OR_RETURN(std::string key_text, ReadFileText(config.key_file, "TLS key file", true, kMaxPemBytes));
  BioPtr bio = MemoryBio(key_text);
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    ERR_clear_error();
    return InvalidArgument("TLS key file " + config.key_file + " holds no PEM private key");
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return InvalidArgument("TLS key file " + config.key_file + " does not match the certificate in " +
                           config.cert_file);
  }
  return Status::Ok();
}

Status LoadCa(SSL_CTX* ctx, const std::string& path) {
  FEDRT_ASSIGN_OR_RETURN(std::string text, ReadFileText(path, "TLS CA file", false, kMaxPemBytes));
  FEDRT_ASSIGN_OR_RETURN(std::vector<X509Ptr> certificates, ParseCertificates(text, path, "TLS CA file"));
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (const X509Ptr& cert : certificates) {
    if (X509_STORE_add_cert(store, cert.get()) != 1) {
      return InvalidArgument("TLS CA file " + path + " is not usable: " + OpenSslErrors());
    }
  }
  return Status::Ok();
}

// ---- Test credentials --------------------------------------------------------

Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, ExtFree> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Internal(std::string("cannot add certificate extension ") + value + ": " + OpenSslErrors());
  }
  return Status::Ok();
}

Result<X509Ptr> MakeCertificate(const char* common_name, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key,
                                uint32_t valid_days, const std::string& alt_names, bool ca) {
  X509Ptr cert(X509_new());
  if (!cert) return Internal("X509_new failed");
  uint8_t serial_bytes[16];
  if (RAND_bytes(serial_bytes, sizeof(serial_bytes)) != 1) return Internal("RAND_bytes failed");
  serial_bytes[0] &= 0x7f;  // positive
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr),
                                                     BN_free);
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_set_version(cert.get(), 2) != 1 || !serial ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), long{86400} * valid_days) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1 ||
      X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("fedrt test"),
                                 -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name),
                                 -1, -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name) != 1) {
    return Internal("cannot fill a certificate: " + OpenSslErrors());
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  FEDRT_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_basic_constraints,
                                     ca ? "critical,CA:TRUE,pathlen:0" : "critical,CA:FALSE"));
  FEDRT_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_key_usage,
                                     ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature"));
  FEDRT_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash"));
  if (!ca) {
    FEDRT_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid:always"));
    FEDRT_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth"));
  }
  if (!alt_names.empty()) {
    FEDRT_RETURN_IF_ERROR(AddExtension(cert.get(), signer, NID_subject_alt_name, alt_names.c_str()));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return Internal("X509_sign failed: " + OpenSslErrors());
  return cert;
}

Result<PkeyPtr> MakeKey() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return Internal("EC P-256 key generation failed: " + OpenSslErrors());
  return key;
}

// Opens `path` for writing with `mode` (created or truncated).
Result<std::FILE*> CreateFile(const std::string& path, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return IoError("cannot create " + path);
  if (::fchmod(fd, mode) != 0) {
    ::close(fd);
    return IoError("cannot set the mode of " + path);
  }
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    ::close(fd);
    return IoError("cannot open " + path);
  }
  return file;
}

Status WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FEDRT_ASSIGN_OR_RETURN(std::FILE * file, CreateFile(path, key != nullptr ? 0600 : 0644));
  const bool ok = key != nullptr ? PEM_write_PrivateKey(file, key, nullptr, nullptr, 0, nullptr, nullptr) == 1
                                 : PEM_write_X509(file, cert) == 1;
  const bool closed = std::fclose(file) == 0;
  if (!ok || !closed) return IoError("cannot write " + path);
  return Status::Ok();
}

}  // namespace

Status TlsFailure(const std::string& what, const std::error_code& ec, const SSL* ssl) {
  if (ssl != nullptr) {
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      return Status(StatusCode::kUnauthenticated,
                    what + ": certificate verify failed: " + X509_verify_cert_error_string(verify));
    }
  }
  std::string text = ec.message();
  if (ec.category() == asio::error::get_ssl_category()) {
    const unsigned long code = static_cast<unsigned long>(ec.value());
    if (ERR_GET_REASON(code) == SSL_R_WRONG_VERSION_NUMBER || ERR_GET_REASON(code) == SSL_R_HTTP_REQUEST ||
        ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
      text += " (is the other side speaking TLS?)";
    }
  }
  return Status(StatusCode::kUnavailable, what + ": " + text);
}

bool TlsSupported() { return true; }

TlsContext::TlsContext(TlsConfig config, std::unique_ptr<Impl> impl)
    : config_(std::move(config)), impl_(std::move(impl)) {}
TlsContext::~TlsContext() = default;

Result<std::shared_ptr<const TlsContext>> TlsContext::Create(const TlsConfig& config) {
  if (config.cert_file.empty() && config.ca_file.empty()) {
    return InvalidArgument("TLS needs a certificate and key (to listen) or a CA file (to dial)");
  }
  if (config.cert_file.empty() && !config.key_file.empty()) {
    return InvalidArgument("TLS key file " + config.key_file + " given without its certificate file");
  }
  auto impl = std::make_unique<Impl>(asio::ssl::context::tls);
  SSL_CTX* ctx = impl->context.native_handle();
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
    return Internal("cannot require TLS 1.2: " + OpenSslErrors());
  }
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_num_tickets(ctx, 0);  // no resumption: nothing to send after the handshake
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (!config.cert_file.empty()) FEDRT_RETURN_IF_ERROR(LoadCertificateAndKey(ctx, config));
  if (!config.ca_file.empty()) FEDRT_RETURN_IF_ERROR(LoadCa(ctx, config.ca_file));
  return std::shared_ptr<const TlsContext>(new TlsContext(config, std::move(impl)));
}

Result<TlsTestFiles> WriteTlsTestFiles(const std::string& dir, const std::vector<std::string>& server_names,
                                       uint32_t valid_days) {
  std::string alt_names;
  for (const std::string& name : server_names) {
    std::error_code ec;
    asio::ip::make_address(name, ec);
    if (!alt_names.empty()) alt_names += ",";
    alt_names += (ec ? "DNS:" : "IP:") + name;
  }
  FEDRT_ASSIGN_OR_RETURN(PkeyPtr ca_key, MakeKey());
  FEDRT_ASSIGN_OR_RETURN(X509Ptr ca, MakeCertificate("fedrt test CA", ca_key.get(), nullptr, ca_key.get(),
                                                     valid_days, "", true));
  FEDRT_ASSIGN_OR_RETURN(PkeyPtr server_key, MakeKey());
  FEDRT_ASSIGN_OR_RETURN(X509Ptr server, MakeCertificate("fedrt server", server_key.get(), ca.get(), ca_key.get(),
                                                         valid_days, alt_names, false));
  FEDRT_ASSIGN_OR_RETURN(PkeyPtr client_key, MakeKey());
  FEDRT_ASSIGN_OR_RETURN(X509Ptr client, MakeCertificate("fedrt client", client_key.get(), ca.get(), ca_key.get(),
                                                         valid_days, "", false));
  TlsTestFiles files;
  files.ca_cert = dir + "/tls-ca.pem";
  files.server_cert = dir + "/tls-server.pem";
  files.server_key = dir + "/tls-server.key";
  files.client_cert = dir + "/tls-client.pem";
  files.client_key = dir + "/tls-client.key";
  FEDRT_RETURN_IF_ERROR(WritePem(files.ca_cert, ca.get(), nullptr));
  FEDRT_RETURN_IF_ERROR(WritePem(files.server_cert, server.get(), nullptr));
  FEDRT_RETURN_IF_ERROR(WritePem(files.server_key, nullptr, server_key.get()));
  FEDRT_RETURN_IF_ERROR(WritePem(files.client_cert, client.get(), nullptr));
  FEDRT_RETURN_IF_ERROR(WritePem(files.client_key, nullptr, client_key.get()));
  return files;
}

}  // namespace transport
}  // namespace fedrt
