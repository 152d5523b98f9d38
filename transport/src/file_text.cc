// ReadFileText (contract in file_text.h).
#include "file_text.h"

#include <sys/stat.h>

#include <cstdio>

namespace fedrt {
namespace transport {

Result<std::string> ReadFileText(const std::string& path, const char* what, bool secret, std::size_t max_bytes) {
  const std::string named = std::string(what) + " " + path;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return NotFound("cannot open " + named);
  struct stat info {};
  if (::fstat(fileno(file), &info) != 0) {
    std::fclose(file);
    return IoError("cannot stat " + named);
  }
  if (secret && (info.st_mode & 0007) != 0) {
    std::fclose(file);
    return Status(StatusCode::kFailedPrecondition, named + " is accessible to other users; chmod o-rwx it");
  }
  std::string text;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    text.append(buffer, n);
    if (text.size() > max_bytes) {
      std::fclose(file);
      return Corrupt(named + " is larger than " + std::to_string(max_bytes >> 20) + " MiB");
    }
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return IoError("cannot read " + named);
  return text;
}

}  // namespace transport
}  // namespace fedrt
