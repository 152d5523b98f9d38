// Whole files for the persistence formats (persist/coding.h makes their
// bytes): an atomic write and a read that tells "no file" from "a file that
// cannot be read". POSIX; a port without files leaves this file out and keeps
// the coding.
//
// WriteFileAtomically writes <path>.tmp, fsyncs it, renames it over <path> and
// fsyncs the directory, so that after a crash <path> holds the old bytes or
// the new ones, whole, and once it returns OK the new ones survive a power
// cut. Every failure (create, short write, ENOSPC, fsync, close, rename) is
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

Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path, std::size_t max_size);

}  // namespace fedrt::persist

#endif  // FEDRT_RUNTIME_SRC_PERSIST_FILE_H_
