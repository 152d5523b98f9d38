// Whole files for the persistence formats (persist/coding.h makes their
// bytes): an atomic write and a read that tells "no file" from "a file that
// cannot be read". POSIX; a port without files leaves this file out and keeps
// the coding.
//
// WriteFileAtomically writes <path>.tmp, fsyncs it, renames it over <path> and
// fsyncs the directory, so that after a crash <path> holds the old bytes or
// the new ones, whole, and once it returns OK the new ones survive a power
// cut. Every failure (create, short write, ENOSPC, fsync, rename) is
// kIoError naming the file and the reason (strerror), removes the temporary
// file and leaves <path> as it was. The one exception is the last step: when
// the directory cannot be fsync'ed <path> already holds the new bytes, and
// the error says so. File systems that cannot fsync a directory (EINVAL) are
// accepted as they are.
//
// ReadWholeFile is kNotFound only when nothing exists at the path (ENOENT).
// Anything else that stops the read (permissions, a directory at the path,
// an I/O error) is kIoError with the reason, and a path that is neither a
// file nor a directory (a FIFO, a device) is kFailedPrecondition: a caller
// that resumes from a file must never take an unreadable file for a first
// start. A file larger than `max_size` is kCorrupt (larger than any valid
// file of the format) and is not read.
//
// Thread-safety: plain functions. One writer per path: writers of one path
// share its temporary file.
#ifndef FEDRT_RUNTIME_SRC_PERSIST_FILE_H_
#define FEDRT_RUNTIME_SRC_PERSIST_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt::persist {

Status WriteFileAtomically(const std::string& path, const std::vector<uint8_t>& bytes);

// The same write in two steps, for a host that writes on another thread
// while its own thread may take every free descriptor (accepting
// connections): Open, on the thread that owns the descriptors, creates
// <path>.tmp and opens its directory, the only descriptors the write needs;
// Commit, on any thread, once, writes, fsyncs, renames and fsyncs the
// directory and opens or closes nothing. The descriptors stay open until Close (or the next
// Open, or the destructor), so the opening thread can let go of them. The
// same errors as WriteFileAtomically, except that a directory that cannot
// be opened fails Open, before anything is written.
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  ~AtomicFileWriter() { Close(); }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status Open(const std::string& path);
  Status Commit(const std::vector<uint8_t>& bytes);
  void Close();
  bool is_open() const { return fd_ >= 0; }

 private:
  std::string path_, temp_, directory_;
  int fd_ = -1;
  int dir_fd_ = -1;
  bool committed_ = false;
};

Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path, std::size_t max_size);

}  // namespace fedrt::persist

#endif  // FEDRT_RUNTIME_SRC_PERSIST_FILE_H_
