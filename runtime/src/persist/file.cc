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

Status AtomicFileWriter::Open(const std::string& path) {
  Close();
  path_ = path;
  temp_ = path + ".tmp";
  directory_ = DirectoryOf(path);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return IoError(temp_ + ": cannot create: " + Reason(errno));
  dir_fd_ = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    const int error = errno;
    Close();
    return Abandon(temp_, "cannot open its directory " + directory_ + " (to fsync it)", error);
  }
  return Status::Ok();
}

Status AtomicFileWriter::Commit(const std::vector<uint8_t>& bytes) {
  if (fd_ < 0 || committed_) {
    return Status(StatusCode::kFailedPrecondition, "atomic write of " + path_ + ": not open");
  }
  // One Commit per Open; the descriptors stay open even when it fails, for
  // the thread that opened them to close.
  committed_ = true;
  if (const int error = WriteAll(fd_, bytes); error != 0) {
    return Abandon(temp_, "cannot write " + std::to_string(bytes.size()) + " bytes", error);
  }
  // The data is on disk before the rename makes it visible.
  if (::fsync(fd_) != 0) {
    const int error = errno;
    return Abandon(temp_, "cannot fsync", error);
  }
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp_.c_str());
    return IoError(path_ + ": cannot rename " + temp_ + " over it: " + Reason(error));
  }
  // The rename itself is durable once the directory is.
  const int synced = ::fsync(dir_fd_) == 0 || errno == EINVAL ? 0 : errno;
  if (synced != 0) {
    return IoError(path_ + ": written, but its directory " + directory_ + " cannot be fsync'ed: " + Reason(synced));
  }
  // The next Open or Close closes the descriptors (close reports nothing
  // that fsync did not).
  return Status::Ok();
}

void AtomicFileWriter::Close() {
  if (fd_ >= 0) ::close(fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  fd_ = dir_fd_ = -1;
  committed_ = false;
}

Status WriteFileAtomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  AtomicFileWriter writer;
  Status status = writer.Open(path);
  if (status.ok()) status = writer.Commit(bytes);
  return status;
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
