// TLS for the TCP connections (optional): the stream between two fedrt
// processes encrypted and the server authenticated by a certificate.
//
// TLS is an option of the TCP layer, not a second transport: a TlsContext set
// in ConnectionOptions::tls makes TcpListener run a TLS server handshake on
// every accepted socket and TcpConnect a client handshake after connecting;
// framing, deadlines, heartbeats and the join (HMAC challenge-response with
// the device's pre-shared key) run unchanged on top. TLS protects the stream;
// the pre-shared key still authenticates the device.
//
// What is verified:
// - a dialler verifies the server's certificate chain against ca_file and the
//   name it carries (DNS or IP subject alternative name) against server_name,
//   or the host dialled when server_name is empty;
// - a listener with a ca_file requires a client certificate chaining to it
//   (mutual TLS); without one it asks for none.
// TLS 1.2 is the minimum and TLS 1.3 is preferred (negotiated when both ends
// have it); no renegotiation, no compression, no session tickets.
//
// Keys and certificates come from PEM files only. A key file accessible to
// other users (mode & 007) is refused, as key files of the join are.
//
// Thread-safety: a TlsContext is immutable after Create and may be shared by
// any number of connections and threads.
#ifndef FEDRT_TRANSPORT_TLS_H_
#define FEDRT_TRANSPORT_TLS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {
namespace transport {

namespace internal {
struct ImplAccess;  // the transport library's own sources reach Impl through it
}  // namespace internal

struct TlsConfig {
  std::string cert_file;    // PEM certificate (chain, leaf first) this side presents; a listener needs one
  std::string key_file;     // PEM private key of cert_file
  std::string ca_file;      // PEM CA certificate(s); a dialler needs one; on a listener: require client certs
  std::string server_name;  // dialler: name the server's certificate must carry; empty: the host dialled
};

// False in a build configured with FEDRT_WITH_TLS=OFF (then Create returns
// kUnsupported).
bool TlsSupported();

class TlsContext {
 public:
  // Loads and checks the files: kNotFound / kIoError naming an unreadable
  // file, kInvalidArgument naming a file without a usable PEM certificate or
  // key, a key that does not match its certificate, or a config that neither
  // listens nor dials (no cert and no CA); kFailedPrecondition for a key file
  // other users can read.
  static Result<std::shared_ptr<const TlsContext>> Create(const TlsConfig& config);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  const TlsConfig& config() const { return config_; }
  bool can_listen() const { return !config_.cert_file.empty(); }
  bool can_dial() const { return !config_.ca_file.empty(); }

  struct Impl;  // defined in the library's sources; reached only through internal::ImplAccess

 private:
  friend struct internal::ImplAccess;
  TlsContext(TlsConfig config, std::unique_ptr<Impl> impl);
  TlsConfig config_;
  std::unique_ptr<Impl> impl_;
};

// TlsContext::Create when any field of `config` is set; null (plain TCP)
// when none is.
inline Result<std::shared_ptr<const TlsContext>> CreateTlsIfConfigured(const TlsConfig& config) {
  if (config.cert_file.empty() && config.key_file.empty() && config.ca_file.empty() &&
      config.server_name.empty()) {
    return std::shared_ptr<const TlsContext>();
  }
  return TlsContext::Create(config);
}

// Throwaway credentials for tests and simulations: a CA and a server and a
// client certificate it signs (EC P-256, SHA-256, valid from an hour ago for
// `valid_days`), written as PEM files into `dir` (keys mode 0600). The server
// certificate carries every entry of `server_names` as an IP address or DNS
// subject alternative name. Made with libcrypto; no openssl program needed.
struct TlsTestFiles {
  std::string ca_cert;
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
};
Result<TlsTestFiles> WriteTlsTestFiles(const std::string& dir, const std::vector<std::string>& server_names,
                                       uint32_t valid_days = 2);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_TLS_H_
