// Atomic whole-file writes and whole-file reads on POSIX (persist/file.h).
#include "persist/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fedrt::persist {
namespace {

std::string Reason(int error) { return std::strerror(error); }

// The directory whose entry a rename of `path` changes.
std::string DirectoryOf(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of `bytes` to `fd`; 0 or errno.
int WriteAll(int fd, const std::vector<uint8_t>& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;  // no progress and no error: do not spin
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

// Removes the temporary file and returns the error. unlink, not remove: a
// directory squatting on the temporary name is not ours to delete.
Status Abandon(const std::string& temp, const std::string& what, int error) {
  ::unlink(temp.c_str());
  return IoError(temp + ": " + what + ": " + Reason(error));
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(temp + ": cannot create: " + Reason(errno));
  if (const int error = WriteAll(fd, bytes); error != 0) {
    ::close(fd);
    return Abandon(temp, "cannot write " + std::to_string(bytes.size()) + " bytes", error);
  }
  // The data is on disk before the rename makes it visible.
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    return Abandon(temp, "cannot fsync", error);
  }
  if (::close(fd) != 0) return Abandon(temp, "cannot close", errno);
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return IoError(path + ": cannot rename " + temp + " over it: " + Reason(error));
  }
  // The rename itself is durable once the directory is.
  const std::string directory = DirectoryOf(path);
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    return IoError(path + ": written, but its directory " + directory + " cannot be opened to fsync it: " +
                   Reason(errno));
  }
  const int synced = ::fsync(dir_fd) == 0 || errno == EINVAL ? 0 : errno;
  ::close(dir_fd);
  if (synced != 0) {
    return IoError(path + ": written, but its directory " + directory + " cannot be fsync'ed: " + Reason(synced));
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path, std::size_t max_size) {
  // O_NONBLOCK: opening a FIFO does not wait for a writer (refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IoError(path + ": cannot open: " + Reason(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return IoError(path + ": cannot stat: " + Reason(error));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return IoError(path + ": cannot read: " + Reason(EISDIR));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(StatusCode::kFailedPrecondition, path + ": not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_size) {
    ::close(fd);
    return Corrupt(path + ": " + std::to_string(st.st_size) + " bytes, more than any valid file (" +
                   std::to_string(max_size) + ")");
  }
  // Sized from fstat, but read to the end: the file may have changed since.
  std::vector<uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  for (;;) {
    if (done == bytes.size()) {
      if (bytes.size() > max_size) break;
      bytes.resize(bytes.size() + 4096);
    }
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return IoError(path + ": cannot read: " + Reason(error));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (done > max_size) {
    return Corrupt(path + ": grew to more than any valid file (" + std::to_string(max_size) + " bytes)");
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace fedrt::persist
