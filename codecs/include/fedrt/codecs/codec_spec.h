// Parsing of codec spec strings: "name:key=value,key=value" (codecs/README.md, "Codec reference"). Codec factories use the typed getters, which
// report unknown keys and bad values with messages a user can act on.
//
// Memory: a CodecSpec keeps its own copy of the text in a fixed buffer
// (kMaxCodecSpecSize bytes, kMaxCodecSpecKeys keys), so parsing and the
// getters make no heap allocation unless they return an error (the error's
// message is a std::string). Codecs constructed in caller storage rely on it.
//
// Thread-safety: a value type.
#ifndef FEDRT_CODECS_CODEC_SPEC_H_
#define FEDRT_CODECS_CODEC_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "fedrt/platform/status.h"

namespace fedrt {

// Longest spec text (name, keys and values) and most keys a spec may have;
// every canonical spec of the registry is far below both.
inline constexpr std::size_t kMaxCodecSpecSize = 127;
inline constexpr std::size_t kMaxCodecSpecKeys = 12;

class CodecSpec {
 public:
  // Accepts "dqsg", "dqsg:s=2", "dqsg:s=2,b=0". Keys are unique; names and
  // keys are lower-case letters, digits and '_'; values are non-empty.
  static Result<CodecSpec> Parse(std::string_view text);

  CodecSpec() = default;
  CodecSpec(const CodecSpec& other) { *this = other; }
  CodecSpec& operator=(const CodecSpec& other);

  std::string_view name() const { return {text_, name_size_}; }
  bool Has(std::string_view key) const;

  // Each getter returns the default when the key is absent, and an error when
  // the value does not parse or lies outside [min, max].
  Result<int64_t> GetInt(std::string_view key, int64_t default_value, int64_t min, int64_t max) const;
  Result<double> GetDouble(std::string_view key, double default_value, double min, double max) const;
  // One of `choices`, e.g. GetChoice("norm", "l2", {"l2", "max"}). The view
  // points into `choices` (or is `default_value`), never into the spec.
  Result<std::string_view> GetChoice(std::string_view key, std::string_view default_value,
                                     std::initializer_list<std::string_view> choices) const;
  // kInvalidArgument naming the first key not in `known`.
  Status CheckKeys(std::initializer_list<std::string_view> known) const;
  Status CheckKeys(const std::string_view* known, std::size_t count) const;

 private:
  struct Item {
    uint8_t key = 0, key_size = 0, value = 0, value_size = 0;  // offsets into text_
  };
  bool Find(std::string_view key, std::string_view* value) const;
  std::string_view Key(const Item& item) const { return {text_ + item.key, item.key_size}; }

  char text_[kMaxCodecSpecSize + 1] = {};  // NUL-terminated: values feed strtod
  std::size_t name_size_ = 0;
  Item items_[kMaxCodecSpecKeys];
  std::size_t count_ = 0;
};

}  // namespace fedrt

#endif  // FEDRT_CODECS_CODEC_SPEC_H_
