// Private: reading the small files the transport is configured with (join
// key files, TLS certificates, keys and CAs), with errors that name them.
#ifndef FEDRT_TRANSPORT_SRC_FILE_TEXT_H_
#define FEDRT_TRANSPORT_SRC_FILE_TEXT_H_

#include <cstddef>
#include <string>

#include "fedrt/platform/status.h"

namespace fedrt {
namespace transport {

// The whole file. Errors read "<what> <path> ..." (what: "key file"):
// kNotFound when it cannot be opened, kIoError when it cannot be read,
// kCorrupt above `max_bytes`, and, when `secret`, kFailedPrecondition for a
// file other users can access (mode & 007).
Result<std::string> ReadFileText(const std::string& path, const char* what, bool secret, std::size_t max_bytes);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_FILE_TEXT_H_
