// Parsing of codec spec strings: "name:key=value,key=value" (codecs/README.md, "Codec reference"). Codec factories use the typed getters, which
// report unknown keys and bad values with messages a user can act on.
//
// Thread-safety: a value type.
#ifndef FEDRT_CODECS_CODEC_SPEC_H_
#define FEDRT_CODECS_CODEC_SPEC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

class CodecSpec {
 public:
  // Accepts "dqsg", "dqsg:s=2", "dqsg:s=2,b=0". Keys are unique; names and
  // keys are lower-case letters, digits and '_'; values are non-empty.
  static Result<CodecSpec> Parse(const std::string& text);

  const std::string& name() const { return name_; }
  bool Has(const std::string& key) const;

  // Each getter returns the default when the key is absent, and an error when
  // the value does not parse or lies outside [min, max].
  Result<int64_t> GetInt(const std::string& key, int64_t default_value, int64_t min, int64_t max) const;
  Result<double> GetDouble(const std::string& key, double default_value, double min, double max) const;
  // One of `choices`, e.g. GetChoice("norm", "l2", {"l2", "max"}).
  Result<std::string> GetChoice(const std::string& key, const std::string& default_value,
                                const std::vector<std::string>& choices) const;
  // kInvalidArgument naming the first key not in `known`.
  Status CheckKeys(const std::vector<std::string>& known) const;

 private:
  const std::string* Find(const std::string& key) const;

  std::string name_;
  std::vector<std::pair<std::string, std::string>> values_;
};

}  // namespace fedrt

#endif  // FEDRT_CODECS_CODEC_SPEC_H_
