// Private: opening a listening socket, shared by the frame listener (tcp.cc)
// and the HTTP responder (http.cc), and the accept errors both back off on.
#ifndef FEDRT_TRANSPORT_SRC_ACCEPTOR_H_
#define FEDRT_TRANSPORT_SRC_ACCEPTOR_H_

#include <asio.hpp>
#include <cstdint>
#include <string>
#include <system_error>

#include "fedrt/platform/status.h"

namespace fedrt {
namespace transport {

// Binds host:port (an IP address; port 0 picks a free one) with
// SO_REUSEADDR and listens. kInvalidArgument for a host that is not an IP
// address, kIoError naming host:port when it cannot be bound.
Status OpenAcceptor(const std::string& host, uint16_t port, asio::ip::tcp::acceptor* acceptor);

// EMFILE, ENFILE, ENOBUFS, ENOMEM: the process or the kernel ran out of
// something a later accept may have again.
bool IsDescriptorExhaustion(const std::error_code& ec);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_ACCEPTOR_H_
