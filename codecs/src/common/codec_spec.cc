#include "fedrt/codecs/codec_spec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace fedrt {
namespace {

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

bool IsWord(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsWordChar(c)) return false;
  }
  return true;
}

}  // namespace

Result<CodecSpec> CodecSpec::Parse(const std::string& text) {
  CodecSpec spec;
  const std::size_t colon = text.find(':');
  spec.name_ = text.substr(0, colon);
  if (!IsWord(spec.name_)) {
    return InvalidArgument("codec spec '" + text + "': expected name[:key=value,...]");
  }
  if (colon == std::string::npos) return spec;
  std::size_t at = colon + 1;
  if (at == text.size()) return InvalidArgument("codec spec '" + text + "': nothing after ':'");
  while (at <= text.size()) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(at, comma - at);
    const std::size_t equals = item.find('=');
    if (equals == std::string::npos) {
      return InvalidArgument("codec spec '" + text + "': '" + item + "' is not key=value");
    }
    std::string key = item.substr(0, equals);
    std::string value = item.substr(equals + 1);
    if (!IsWord(key) || value.empty()) {
      return InvalidArgument("codec spec '" + text + "': '" + item + "' is not key=value");
    }
    if (spec.Find(key) != nullptr) {
      return InvalidArgument("codec spec '" + text + "': key '" + key + "' given twice");
    }
    spec.values_.emplace_back(std::move(key), std::move(value));
    at = comma + 1;
  }
  return spec;
}

const std::string* CodecSpec::Find(const std::string& key) const {
  for (const auto& [k, v] : values_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool CodecSpec::Has(const std::string& key) const { return Find(key) != nullptr; }

Result<int64_t> CodecSpec::GetInt(const std::string& key, int64_t default_value, int64_t min,
                                  int64_t max) const {
  const std::string* value = Find(key);
  if (value == nullptr) return default_value;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(value->c_str(), &end, 10);
  if (errno != 0 || end == value->c_str() || *end != '\0') {
    return InvalidArgument(name_ + ": " + key + "=" + *value + " is not an integer");
  }
  if (parsed < min || parsed > max) {
    return InvalidArgument(name_ + ": " + key + "=" + *value + " is outside " + std::to_string(min) +
                           ".." + std::to_string(max));
  }
  return static_cast<int64_t>(parsed);
}

Result<double> CodecSpec::GetDouble(const std::string& key, double default_value, double min,
                                    double max) const {
  const std::string* value = Find(key);
  if (value == nullptr) return default_value;
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(value->c_str(), &end);
  if (errno != 0 || end == value->c_str() || *end != '\0' || !std::isfinite(parsed)) {
    return InvalidArgument(name_ + ": " + key + "=" + *value + " is not a number");
  }
  if (parsed < min || parsed > max) {
    return InvalidArgument(name_ + ": " + key + "=" + *value + " is outside " + std::to_string(min) +
                           ".." + std::to_string(max));
  }
  return parsed;
}

Result<std::string> CodecSpec::GetChoice(const std::string& key, const std::string& default_value,
                                         const std::vector<std::string>& choices) const {
  const std::string* value = Find(key);
  if (value == nullptr) return default_value;
  std::string accepted;
  for (const std::string& choice : choices) {
    if (*value == choice) return choice;
    accepted += (accepted.empty() ? "" : ", ") + choice;
  }
  return InvalidArgument(name_ + ": " + key + "=" + *value + " is not one of " + accepted);
}

Status CodecSpec::CheckKeys(const std::vector<std::string>& known) const {
  for (const auto& item : values_) {
    bool found = false;
    for (const std::string& k : known) found = found || item.first == k;
    if (!found) {
      std::string accepted;
      for (const std::string& k : known) accepted += (accepted.empty() ? "" : ", ") + k;
      return InvalidArgument(name_ + ": unknown key '" + item.first + "' (accepted: " +
                             (accepted.empty() ? std::string("none") : accepted) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace fedrt
