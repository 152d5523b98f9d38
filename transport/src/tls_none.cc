// TlsContext in a build without TLS (FEDRT_WITH_TLS=OFF): every use is a
// clear kUnsupported, and the rest of the transport works as plain TCP.
#include "fedrt/transport/tls.h"

namespace fedrt {
namespace transport {
namespace {

Status NoTls() {
  return Unsupported("this fedrt was built without TLS (FEDRT_WITH_TLS=OFF); rebuild with libssl to use it");
}

}  // namespace

struct TlsContext::Impl {};

bool TlsSupported() { return false; }

TlsContext::TlsContext(TlsConfig config, std::unique_ptr<Impl> impl)
    : config_(std::move(config)), impl_(std::move(impl)) {}
TlsContext::~TlsContext() = default;

Result<std::shared_ptr<const TlsContext>> TlsContext::Create(const TlsConfig& config) {
  (void)config;
  return NoTls();
}

Result<TlsTestFiles> WriteTlsTestFiles(const std::string& dir, const std::vector<std::string>& server_names,
                                       uint32_t valid_days) {
  (void)dir;
  (void)server_names;
  (void)valid_days;
  return NoTls();
}

}  // namespace transport
}  // namespace fedrt
