#include "cli/output_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace fedrt::cli {

Status MakeOutputDirectory(const std::string& dir, unsigned mode) {
  // Each prefix that ends before a '/' is a parent; the whole path last.
  for (std::size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const bool last = end == std::string::npos;
    const std::string part = last ? dir : dir.substr(0, end);
    if (!part.empty() && part.back() != '/' && ::mkdir(part.c_str(), last ? mode : 0755) != 0) {
      const int error = errno;
      struct stat info;
      if (error != EEXIST || ::stat(part.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
        return IoError(part + ": cannot create: " + std::strerror(error == EEXIST ? ENOTDIR : error));
      }
    }
    if (last) return Status::Ok();
  }
}

Status OpenOutputFile(const std::string& path, std::ofstream* file) {
  errno = 0;
  file->open(path, std::ios::trunc);
  if (*file) return Status::Ok();
  return IoError(path + ": cannot open for writing: " + std::strerror(errno != 0 ? errno : EIO));
}

}  // namespace fedrt::cli
