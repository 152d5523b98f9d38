// Private: how the transport's sources reach the Impl behind the public
// EventLoop, FrameSlot and TlsContext classes, which keep it out of their
// interface (they declare this struct their friend).
#ifndef FEDRT_TRANSPORT_SRC_IMPL_ACCESS_H_
#define FEDRT_TRANSPORT_SRC_IMPL_ACCESS_H_

#include <memory>

namespace fedrt {
namespace transport {
namespace internal {

struct ImplAccess {
  template <typename T>
  static auto& Of(T& object) {
    return *object.impl_;
  }
  template <typename T>
  static const auto& Shared(const T& object) {
    return object.impl_;
  }
};

}  // namespace internal
}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_IMPL_ACCESS_H_
