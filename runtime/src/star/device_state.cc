// The device's residual file (star/device_state.h).
#include "star/device_state.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "fedrt/codecs/error_feedback.h"

namespace fedrt::star {
namespace {

constexpr char kResidualMagic[8] = {'F', 'E', 'D', 'R', 'T', 'E', 'F', '1'};

}  // namespace

Status SaveResidual(const std::string& path, const float* residual, std::size_t d) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t n = d;
    out.write(kResidualMagic, sizeof(kResidualMagic));
    out.write(reinterpret_cast<const char*>(&n), sizeof(n));
    out.write(reinterpret_cast<const char*>(residual), static_cast<std::streamsize>(d * sizeof(float)));
    out.flush();
    if (!out) return IoError(tmp + ": cannot write the residual");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return IoError(path + ": cannot rename the residual");
  return Status();
}

Result<std::vector<float>> LoadResidual(const std::string& path, std::size_t d) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path);
  char magic[8] = {};
  uint64_t n = 0;
  in.read(magic, sizeof(magic));
  if (!in || std::memcmp(magic, kResidualMagic, sizeof(magic)) != 0) {
    return Corrupt(path + ": not a fedrt residual file");
  }
  in.read(reinterpret_cast<char*>(&n), sizeof(n));
  if (!in) return Corrupt(path + ": truncated residual header");
  if (n != d) {
    return Status(StatusCode::kFailedPrecondition, path + ": holds a residual of " + std::to_string(n) +
                                                       " values, this model has " + std::to_string(d));
  }
  std::vector<float> values(d);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(d * sizeof(float)));
  if (!in) return Corrupt(path + ": truncated residual (" + std::to_string(in.gcount()) + " of " +
                          std::to_string(d * sizeof(float)) + " value bytes)");
  if (in.peek() != std::char_traits<char>::eof()) return Corrupt(path + ": extra bytes after the residual");
  if (!CheckFinite(values.data(), d).ok()) return Corrupt(path + ": residual is not finite");
  return values;
}

}  // namespace fedrt::star
