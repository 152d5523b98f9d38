#include "fedrt/codecs/codec_spec.h"
#include "fedrt/platform/concat.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace fedrt {
namespace {

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

bool IsWord(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsWordChar(c)) return false;
  }
  return true;
}

std::string Quoted(std::string_view text) { return "codec spec '" + std::string(text) + "'"; }

std::string Accepted(const std::string_view* known, std::size_t count) {
  std::string accepted;
  for (std::size_t i = 0; i < count; ++i) accepted += (accepted.empty() ? "" : ", ") + std::string(known[i]);
  return accepted;
}

}  // namespace

CodecSpec& CodecSpec::operator=(const CodecSpec& other) {
  std::memcpy(text_, other.text_, sizeof text_);
  name_size_ = other.name_size_;
  std::memcpy(items_, other.items_, sizeof items_);
  count_ = other.count_;
  return *this;
}

Result<CodecSpec> CodecSpec::Parse(std::string_view text) {
  if (text.size() > kMaxCodecSpecSize) {
    return InvalidArgument(Concat({Quoted(text), ": longer than ", kMaxCodecSpecSize, " characters"}));
  }
  CodecSpec spec;
  std::memcpy(spec.text_, text.data(), text.size());
  spec.text_[text.size()] = '\0';
  const std::size_t colon = text.find(':');
  spec.name_size_ = colon == std::string_view::npos ? text.size() : colon;
  if (!IsWord(spec.name())) return InvalidArgument(Quoted(text) + ": expected name[:key=value,...]");
  if (colon == std::string_view::npos) return spec;
  std::size_t at = colon + 1;
  if (at == text.size()) return InvalidArgument(Quoted(text) + ": nothing after ':'");
  while (at <= text.size()) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = text.substr(at, comma - at);
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      return InvalidArgument(Quoted(text) + ": '" + std::string(item) + "' is not key=value");
    }
    const std::string_view key = item.substr(0, equals);
    const std::string_view value = item.substr(equals + 1);
    if (!IsWord(key) || value.empty()) {
      return InvalidArgument(Quoted(text) + ": '" + std::string(item) + "' is not key=value");
    }
    if (spec.Has(key)) return InvalidArgument(Quoted(text) + ": key '" + std::string(key) + "' given twice");
    if (spec.count_ == kMaxCodecSpecKeys) {
      return InvalidArgument(Concat({Quoted(text), ": more than ", kMaxCodecSpecKeys, " keys"}));
    }
    // The values are NUL-terminated in place of their ',' for strtoll/strtod.
    spec.text_[comma] = '\0';
    Item& stored = spec.items_[spec.count_++];
    stored.key = static_cast<uint8_t>(at);
    stored.key_size = static_cast<uint8_t>(key.size());
    stored.value = static_cast<uint8_t>(at + equals + 1);
    stored.value_size = static_cast<uint8_t>(value.size());
    at = comma + 1;
  }
  return spec;
}

bool CodecSpec::Find(std::string_view key, std::string_view* value) const {
  for (std::size_t i = 0; i < count_; ++i) {
    if (Key(items_[i]) == key) {
      *value = std::string_view(text_ + items_[i].value, items_[i].value_size);
      return true;
    }
  }
  return false;
}

bool CodecSpec::Has(std::string_view key) const {
  std::string_view value;
  return Find(key, &value);
}

Result<int64_t> CodecSpec::GetInt(std::string_view key, int64_t default_value, int64_t min, int64_t max) const {
  std::string_view value;
  if (!Find(key, &value)) return default_value;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(value.data(), &end, 10);  // value is NUL-terminated
  auto what = [&] { return std::string(name()) + ": " + std::string(key) + "=" + std::string(value); };
  if (errno != 0 || end == value.data() || *end != '\0') return InvalidArgument(what() + " is not an integer");
  if (parsed < min || parsed > max) {
    return InvalidArgument(Concat({what(), " is outside ", min, "..", max}));
  }
  return static_cast<int64_t>(parsed);
}

Result<double> CodecSpec::GetDouble(std::string_view key, double default_value, double min, double max) const {
  std::string_view value;
  if (!Find(key, &value)) return default_value;
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(value.data(), &end);
  auto what = [&] { return std::string(name()) + ": " + std::string(key) + "=" + std::string(value); };
  if (errno != 0 || end == value.data() || *end != '\0' || !std::isfinite(parsed)) {
    return InvalidArgument(what() + " is not a number");
  }
  if (parsed < min || parsed > max) {
    return InvalidArgument(what() + " is outside " + std::to_string(min) + ".." + std::to_string(max));
  }
  return parsed;
}

Result<std::string_view> CodecSpec::GetChoice(std::string_view key, std::string_view default_value,
                                              std::initializer_list<std::string_view> choices) const {
  std::string_view value;
  if (!Find(key, &value)) return default_value;
  for (std::string_view choice : choices) {
    if (value == choice) return choice;
  }
  return InvalidArgument(std::string(name()) + ": " + std::string(key) + "=" + std::string(value) +
                         " is not one of " + Accepted(choices.begin(), choices.size()));
}

Status CodecSpec::CheckKeys(std::initializer_list<std::string_view> known) const {
  return CheckKeys(known.begin(), known.size());
}

Status CodecSpec::CheckKeys(const std::string_view* known, std::size_t count) const {
  for (std::size_t i = 0; i < count_; ++i) {
    bool found = false;
    for (std::size_t k = 0; k < count; ++k) found = found || Key(items_[i]) == known[k];
    if (!found) {
      const std::string accepted = Accepted(known, count);
      return InvalidArgument(std::string(name()) + ": unknown key '" + std::string(Key(items_[i])) +
                             "' (accepted: " + (accepted.empty() ? std::string("none") : accepted) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace fedrt
