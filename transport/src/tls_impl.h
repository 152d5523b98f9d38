// Private: the OpenSSL context behind a TlsContext (FEDRT_WITH_TLS builds).
#ifndef FEDRT_TRANSPORT_SRC_TLS_IMPL_H_
#define FEDRT_TRANSPORT_SRC_TLS_IMPL_H_

#include <asio/ssl.hpp>
#include <string>

#include "fedrt/transport/tls.h"

namespace fedrt {
namespace transport {

struct TlsContext::Impl {
  explicit Impl(asio::ssl::context::method method) : context(method) {}
  asio::ssl::context context;
};

// A failed TLS handshake or read as a Status: kUnauthenticated with the
// verification result when the other side's certificate was refused, else
// kUnavailable with OpenSSL's reason. `what` starts the message.
Status TlsFailure(const std::string& what, const std::error_code& ec, const SSL* ssl);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_TLS_IMPL_H_
