// ReadFileText (contract in file_text.h).
#include "file_text.h"

#if defined(__unix__) || defined(__APPLE__)
#include <sys/stat.h>
#define FEDRT_HAVE_FILES 1
#else
#define FEDRT_HAVE_FILES 0  // bare metal: the application holds keys in memory
#endif

#include <cstdio>

namespace fedrt {
namespace transport {

#if !FEDRT_HAVE_FILES
Result<std::string> ReadFileText(const std::string& path, const char* what, bool, std::size_t) {
  return Unsupported(std::string(what) + " " + path + ": this build has no files");
}
#else

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

#endif  // FEDRT_HAVE_FILES

}  // namespace transport
}  // namespace fedrt
