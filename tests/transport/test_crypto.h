// The Crypto tests hand to the join and the engines: libcrypto's
// (SystemCrypto) where the build has it, otherwise the example port's
// portable one, as a firmware application would supply its own. Tests that
// include this link fedrt_example_port.
#ifndef FEDRT_TESTS_TRANSPORT_TEST_CRYPTO_H_
#define FEDRT_TESTS_TRANSPORT_TEST_CRYPTO_H_

#include "fedrt/platform/config.h"
#include "fedrt/transport/crypto.h"
#if !FEDRT_HAVE_OPENSSL
#include "port/port_crypto.h"
#endif

namespace fedrt {
namespace transport {

#if FEDRT_HAVE_OPENSSL
inline Crypto& TestCrypto() { return SystemCrypto(); }
#else
// Without libcrypto the application supplies the primitives: here the
// example port's (examples/port/port_crypto.h), as 03_embed uses them.
inline Crypto& TestCrypto() {
  static fedrt_example::PortCrypto crypto;
  return crypto;
}
#endif

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TESTS_TRANSPORT_TEST_CRYPTO_H_
