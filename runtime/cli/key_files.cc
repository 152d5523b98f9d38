#include "cli/key_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fedrt/transport/crypto.h"

namespace fedrt::cli {
namespace {

Status MakePrivateDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return Status::Ok();
  return IoError(dir + ": cannot create: " + std::strerror(errno));
}

}  // namespace

Result<std::string> NewKeyLine(const std::string& id) {
  uint8_t key[32];
  FEDRT_RETURN_IF_ERROR(transport::SystemCrypto().RandomBytes(key, sizeof key));
  static const char kDigits[] = "0123456789abcdef";
  std::string line = id + " ";
  for (uint8_t b : key) {
    line += kDigits[b >> 4];
    line += kDigits[b & 15];
  }
  return line + "\n";
}

Status WritePrivateFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IoError(path + ": cannot create: " + std::strerror(errno));
  const bool written =
      ::fchmod(fd, 0600) == 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int error = errno;
  if (::close(fd) != 0 || !written) return IoError(path + ": cannot write: " + std::strerror(written ? errno : error));
  return Status::Ok();
}

Status WriteDeviceKeys(const std::string& dir, const std::vector<std::string>& ids, bool overwrite) {
  const std::string all_path = dir + "/keys.txt";
  struct stat st;
  if (!overwrite && ::stat(all_path.c_str(), &st) == 0) {
    return Status(StatusCode::kFailedPrecondition,
                  all_path + " exists: new keys would lock out every device that has the old ones "
                             "(pass --force to replace them)");
  }
  FEDRT_RETURN_IF_ERROR(MakePrivateDirectory(dir));
  FEDRT_RETURN_IF_ERROR(MakePrivateDirectory(dir + "/keys"));
  std::string all = "# fedrt device keys: '<id> <hex key>' per line; the aggregator's --key-file\n";
  for (const std::string& id : ids) {
    auto line = NewKeyLine(id);
    FEDRT_RETURN_IF_ERROR(line.status());
    FEDRT_RETURN_IF_ERROR(WritePrivateFile(dir + "/keys/" + id + ".key", *line));
    all += *line;
  }
  return WritePrivateFile(all_path, all);
}

}  // namespace fedrt::cli
