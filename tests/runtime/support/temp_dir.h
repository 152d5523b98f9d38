// A fresh directory under $TMPDIR (or /tmp) for one test, removed with its
// files when the object goes out of scope.
#ifndef FEDRT_TESTS_SUPPORT_TEMP_DIR_H_
#define FEDRT_TESTS_SUPPORT_TEMP_DIR_H_

#include <cstdlib>
#include <fstream>
#include <string>

#include <ftw.h>
#include <stdio.h>
#include <unistd.h>

namespace fedrt::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/fedrt-test-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (!path_.empty()) {
      nftw(path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
           FTW_DEPTH | FTW_PHYS);
    }
  }
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A whole file's bytes; empty when it cannot be read.
inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return std::string();
  std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(&bytes[0], static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_SUPPORT_TEMP_DIR_H_
