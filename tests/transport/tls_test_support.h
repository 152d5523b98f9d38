// Throwaway TLS credentials for a test: a CA, a server certificate for
// 127.0.0.1 and localhost, and a client certificate, generated with libcrypto
// into a temporary directory (nothing committed, nothing that expires, no
// openssl program), removed with the object.
#ifndef FEDRT_TESTS_TRANSPORT_TLS_TEST_SUPPORT_H_
#define FEDRT_TESTS_TRANSPORT_TLS_TEST_SUPPORT_H_

#include <memory>
#include <string>

#include "fedrt/transport/tls.h"
#include "temp_dir.h"

namespace fedrt {
namespace transport {
namespace testing {

class TlsCredentials {
 public:
  TlsCredentials() {
    if (!dir_.ok()) return;
    Result<TlsTestFiles> files = WriteTlsTestFiles(dir_.path(), {"127.0.0.1", "localhost"});
    if (files.ok()) files_ = *files;
    status_ = files.status();
  }
  bool ok() const { return dir_.ok() && status_.ok(); }
  const Status& status() const { return status_; }
  const TlsTestFiles& files() const { return files_; }
  std::string File(const std::string& name) const { return dir_.File(name); }

  TlsConfig ServerConfig() const {
    TlsConfig config;
    config.cert_file = files_.server_cert;
    config.key_file = files_.server_key;
    return config;
  }
  TlsConfig ClientConfig() const {
    TlsConfig config;
    config.ca_file = files_.ca_cert;
    return config;
  }
  std::shared_ptr<const TlsContext> Server() const { return Make(ServerConfig()); }
  std::shared_ptr<const TlsContext> Client() const { return Make(ClientConfig()); }

  static std::shared_ptr<const TlsContext> Make(const TlsConfig& config) {
    Result<std::shared_ptr<const TlsContext>> context = TlsContext::Create(config);
    return context.ok() ? *context : nullptr;
  }

 private:
  fedrt::testing::TempDir dir_;
  TlsTestFiles files_;
  Status status_ = Status(StatusCode::kInternal, "no temporary directory");
};

}  // namespace testing
}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TESTS_TRANSPORT_TLS_TEST_SUPPORT_H_
