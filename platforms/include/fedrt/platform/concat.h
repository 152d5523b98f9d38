// Concat: an error message from text and integers in one call.
//
// Status messages name the sizes and counts they are about ("frame of 70000
// bytes exceeds the limit of 65536"). Built with std::string's operator+ and
// std::to_string, every such message is a chain of inlined string operations
// at its call site; on a microcontroller those chains cost kilobytes of flash
// for code that only runs on an error path. Concat is one out-of-line call.
//
// Thread-safety: no shared state.
#ifndef FEDRT_PLATFORM_CONCAT_H_
#define FEDRT_PLATFORM_CONCAT_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

namespace fedrt {

// One piece of a message built by Concat: text, or an integer written in
// decimal into the piece itself (so the piece must not outlive the call).
class MessagePiece {
 public:
  MessagePiece(const char* text) : text_(text) {}              // NOLINT: implicit by design
  MessagePiece(std::string_view text) : text_(text) {}         // NOLINT
  MessagePiece(const std::string& text) : text_(text) {}       // NOLINT
  template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool> &&
                                                      !std::is_same_v<Int, char>>>
  MessagePiece(Int value)  // NOLINT
      : text_(Decimal(static_cast<uint64_t>(value), IsNegative(value))) {}
  MessagePiece(const MessagePiece&) = delete;  // text_ may point into digits_
  MessagePiece& operator=(const MessagePiece&) = delete;
  std::string_view text() const { return text_; }

 private:
  template <typename Int>
  static bool IsNegative(Int value) {
    if constexpr (std::is_signed_v<Int>) {
      return value < 0;
    } else {
      return false;
    }
  }
  // |value| of a two's complement integer when `negative`, else value.
  std::string_view Decimal(uint64_t value, bool negative);
  char digits_[21];
  std::string_view text_;
};

// The pieces joined: Corrupt(Concat({"a frame of ", size, " bytes"})). Out
// of line and in one allocation, so an error path costs a call, not a chain
// of inlined string operations (flash on a microcontroller).
std::string Concat(std::initializer_list<MessagePiece> pieces);

}  // namespace fedrt

#endif  // FEDRT_PLATFORM_CONCAT_H_
