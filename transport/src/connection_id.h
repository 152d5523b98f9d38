// Private: the ids every kind of connection draws from (Connection::id()).
#ifndef FEDRT_TRANSPORT_SRC_CONNECTION_ID_H_
#define FEDRT_TRANSPORT_SRC_CONNECTION_ID_H_

#include <cstdint>

namespace fedrt {
namespace transport {

// Unique within the process, never 0; safe from any thread.
uint64_t NextConnectionId();

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_CONNECTION_ID_H_
