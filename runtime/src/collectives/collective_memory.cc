// Bind's checks for every collective (collective_memory.h).
#include "fedrt/runtime/collective_memory.h"

#include <string>

namespace fedrt {
namespace peer {
namespace internal {

Status CheckCollectiveMemory(const void* memory, std::size_t size, std::size_t needed, std::size_t alignment,
                             const char* who) {
  if (needed == 0) return Status::Ok();
  if (memory == nullptr || size < needed) {
    return OutOfRange(std::string(who) + " needs " + std::to_string(needed) + " bytes of memory, it was given " +
                      std::to_string(memory == nullptr ? 0 : size));
  }
  if (reinterpret_cast<std::uintptr_t>(memory) % alignment != 0) {
    return InvalidArgument(std::string(who) + "'s memory must be aligned to " + std::to_string(alignment) + " bytes");
  }
  return Status::Ok();
}

}  // namespace internal
}  // namespace peer
}  // namespace fedrt
