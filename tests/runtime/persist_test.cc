// The persistence helper (runtime/src/persist/): the coding round-trips every
// value type little-endian, a reader never reads past its bytes and its first
// failure sticks, the frame's magic, size and CRC-32C checks catch damage; the
// atomic write replaces a file whole or leaves it as it was, removing its
// temporary file, on every failure this process can provoke (also as root);
// reading tells a missing file (not found) from one that cannot be read.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "fedrt/codecs/payload.h"
#include "persist/coding.h"
#include "persist/file.h"
#include "temp_dir.h"

namespace fedrt::persist {
namespace {

constexpr char kMagic[kMagicSize] = {'T', 'E', 'S', 'T', 'F', 'I', 'L', 'E'};

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

TEST_CASE("the writer and reader round-trip every value type little-endian") {
  Writer w;
  w.U8(0xA5);
  w.U16(0xBEEF);
  w.U32(0x01020304u);
  w.U64(0x0102030405060708ull);
  w.I32(-7);
  w.I64(std::numeric_limits<int64_t>::min());
  w.F32(-0.0f);
  const std::vector<float> floats = {1.5f, std::numeric_limits<float>::denorm_min(), -3.25f};
  w.F32s(floats);
  const double doubles[] = {-0.0, 1e-300, 3.5};
  w.F64s(doubles, 3);
  w.String("spec:a=1");
  w.String("");
  w.Bytes("xyz", 3);
  std::vector<uint8_t> bytes = std::move(w).Finish();
  REQUIRE(bytes.size() == 1 + 2 + 4 + 8 + 4 + 8 + 4 + 12 + 24 + 12 + 4 + 3 + 4);
  // Little-endian on every host.
  CHECK(bytes[1] == 0xEF);
  CHECK(bytes[2] == 0xBE);
  CHECK(bytes[3] == 0x04);
  CHECK(bytes[7] == 0x08);
  CHECK(LoadLe32(bytes.data() + bytes.size() - 4) == Crc32c(bytes.data(), bytes.size() - 4));
  CHECK(Crc32cTrailerMatches(bytes.data(), bytes.size()));

  Reader r(bytes.data(), bytes.size() - 4);
  CHECK(r.U8() == 0xA5);
  CHECK(r.U16() == 0xBEEF);
  CHECK(r.U32() == 0x01020304u);
  CHECK(r.U64() == 0x0102030405060708ull);
  CHECK(r.I32() == -7);
  CHECK(r.I64() == std::numeric_limits<int64_t>::min());
  const float zero = r.F32();
  CHECK((zero == 0.0f && std::signbit(zero)));
  std::vector<float> back;
  r.F32s(3, &back);
  CHECK(std::memcmp(back.data(), floats.data(), sizeof(float) * 3) == 0);
  double doubles_back[3] = {};
  r.F64s(3, doubles_back);
  CHECK(std::memcmp(doubles_back, doubles, sizeof doubles) == 0);
  CHECK(r.String(8) == "spec:a=1");
  CHECK(r.String(0).empty());
  const uint8_t* xyz = r.Bytes(3);
  REQUIRE(xyz != nullptr);
  CHECK(std::memcmp(xyz, "xyz", 3) == 0);
  CHECK(r.AtEnd());
}

TEST_CASE("a reader never reads past its bytes and its first failure sticks") {
  const std::vector<uint8_t> bytes = {1, 2, 3, 4, 5, 6};
  Reader r(bytes.data(), bytes.size());
  CHECK(r.U32() == 0x04030201u);
  CHECK(r.U32() == 0);  // 2 bytes left
  CHECK_FALSE(r.ok());
  CHECK(r.U8() == 0);  // sticks, although a byte is left
  CHECK_FALSE(r.AtEnd());

  // A count larger than the bytes can hold fails before allocating, also
  // where 4 * count overflows.
  Reader counts(bytes.data(), bytes.size());
  std::vector<float> out;
  counts.F32s(2, &out);
  CHECK_FALSE(counts.ok());
  CHECK(out.empty());
  Reader huge(bytes.data(), bytes.size());
  huge.F32s(uint64_t{1} << 62, &out);
  CHECK_FALSE(huge.ok());
  double d = 7;
  Reader few(bytes.data(), bytes.size());
  few.F64s(1, &d);  // 6 bytes: not one double
  CHECK_FALSE(few.ok());
  CHECK(d == 7);
  Reader wraps(bytes.data(), bytes.size());
  wraps.F64s(SIZE_MAX / 8 + 1, &d);  // 8 * count wraps to 0 on any size_t width
  CHECK_FALSE(wraps.ok());

  // A string longer than allowed, or than the bytes left.
  Writer w;
  w.String("abcdef");
  const std::vector<uint8_t> s = std::move(w).Finish();
  Reader too_long(s.data(), s.size() - 4);
  CHECK(too_long.String(5).empty());
  CHECK_FALSE(too_long.ok());
  Reader cut(s.data(), s.size() - 4 - 1);
  CHECK(cut.String(100).empty());
  CHECK_FALSE(cut.ok());

  Reader failed(bytes.data(), bytes.size());
  failed.Fail();
  CHECK(failed.U8() == 0);
  CHECK(failed.Bytes(1) == nullptr);
}

TEST_CASE("a frame names the file when the magic is wrong or it is cut short, and its CRC catches every flipped bit") {
  Writer w(kMagic, 3);
  w.U64(42);
  const std::vector<uint8_t> bytes = std::move(w).Finish();
  uint32_t version = 0;
  Reader fields;
  REQUIRE(OpenFrame(bytes.data(), bytes.size(), kMagic, "f.bin", "a test file", &version, &fields).ok());
  CHECK(version == 3);
  CHECK(fields.U64() == 42);
  CHECK(fields.AtEnd());

  for (std::size_t size = 0; size < kFrameOverhead; ++size) {
    const Status s = OpenFrame(bytes.data(), size, kMagic, "f.bin", "a test file", &version, &fields);
    CHECK(s.code() == StatusCode::kCorrupt);
    CHECK(s.message().find("f.bin: ") == 0);
    CHECK(s.message().find(size < kMagicSize ? "not a test file (bad magic)" : "truncated") != std::string::npos);
  }
  std::vector<uint8_t> foreign = bytes;
  foreign[0] = 'X';
  CHECK(OpenFrame(foreign.data(), foreign.size(), kMagic, "f.bin", "a test file", &version, &fields).message() ==
        "f.bin: not a test file (bad magic)");

  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> damaged = bytes;
      damaged[i] = static_cast<uint8_t>(damaged[i] ^ (1u << bit));
      REQUIRE_FALSE(Crc32cTrailerMatches(damaged.data(), damaged.size()));
    }
  }
  for (std::size_t size = 0; size < bytes.size(); ++size) CHECK_FALSE(Crc32cTrailerMatches(bytes.data(), size));
}

TEST_CASE("an atomic write creates and then replaces a file whole and leaves no temporary file") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("state.bin");
  REQUIRE(WriteFileAtomically(path, Bytes("first version")).ok());
  CHECK(testing::ReadFileBytes(path) == "first version");
  REQUIRE(WriteFileAtomically(path, Bytes("second")).ok());
  CHECK(testing::ReadFileBytes(path) == "second");
  CHECK_FALSE(Exists(path + ".tmp"));
  REQUIRE(WriteFileAtomically(path, {}).ok());
  Result<std::vector<uint8_t>> empty = ReadWholeFile(path, 100);
  REQUIRE(empty.ok());
  CHECK(empty->empty());

  // A file name without a directory is written in the working directory.
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof cwd) != nullptr);
  REQUIRE(::chdir(dir.path().c_str()) == 0);
  const Status relative = WriteFileAtomically("relative.bin", Bytes("here"));
  REQUIRE(::chdir(cwd) == 0);
  CHECK(relative.ok());
  CHECK(testing::ReadFileBytes(dir.File("relative.bin")) == "here");
}

// The failures below happen for root too: CI runs the tests as root, which
// ignores permission bits.
TEST_CASE("a failed atomic write names the file and the reason and leaves the previous file as it was") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("state.bin");
  REQUIRE(WriteFileAtomically(path, Bytes("previous")).ok());

  SUBCASE("a directory where the temporary file goes") {
    REQUIRE(::mkdir((path + ".tmp").c_str(), 0755) == 0);
    const Status s = WriteFileAtomically(path, Bytes("new"));
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message() == path + ".tmp: cannot create: " + std::strerror(EISDIR));
    CHECK(testing::ReadFileBytes(path) == "previous");
    struct stat st;
    CHECK((::stat((path + ".tmp").c_str(), &st) == 0 && S_ISDIR(st.st_mode)));  // not ours to remove
  }
  SUBCASE("a path under a regular file") {
    const Status s = WriteFileAtomically(path + "/child", Bytes("new"));
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message().find(path + "/child.tmp: cannot create: ") == 0);
    CHECK(s.message().find(std::strerror(ENOTDIR)) != std::string::npos);
    CHECK(testing::ReadFileBytes(path) == "previous");
  }
  SUBCASE("a directory that does not exist") {
    const Status s = WriteFileAtomically(dir.File("absent/state.bin"), Bytes("new"));
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message().find(std::strerror(ENOENT)) != std::string::npos);
  }
  SUBCASE("a directory at the path itself: the rename fails and the temporary file is removed") {
    const std::string taken = dir.File("taken");
    REQUIRE(::mkdir(taken.c_str(), 0755) == 0);
    WriteRaw(taken + "/inside", "keep me");
    const Status s = WriteFileAtomically(taken, Bytes("new"));
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message().find(taken + ": cannot rename " + taken + ".tmp over it: ") == 0);
    CHECK_FALSE(Exists(taken + ".tmp"));
    CHECK(testing::ReadFileBytes(taken + "/inside") == "keep me");
  }
  SUBCASE("a write cut short by the file size limit (as a full disk would)") {
    // RLIMIT_FSIZE makes write() fail with EFBIG past the limit, also for
    // root; SIGXFSZ would otherwise end the process.
    struct rlimit saved;
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    struct sigaction ignore = {};
    struct sigaction previous_action = {};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(::sigaction(SIGXFSZ, &ignore, &previous_action) == 0);
    struct rlimit limit = saved;
    limit.rlim_cur = 1000;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
    const Status s = WriteFileAtomically(path, std::vector<uint8_t>(5000, 7));
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::sigaction(SIGXFSZ, &previous_action, nullptr);
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message() == path + ".tmp: cannot write 5000 bytes: " + std::strerror(EFBIG));
    CHECK_FALSE(Exists(path + ".tmp"));
    CHECK(testing::ReadFileBytes(path) == "previous");
  }
}

TEST_CASE("reading is not found only when there is no file and a file that cannot be read is an error with the reason") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("state.bin");

  Result<std::vector<uint8_t>> missing = ReadWholeFile(path, 100);
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find(path) != std::string::npos);

  REQUIRE(::mkdir(path.c_str(), 0755) == 0);
  Result<std::vector<uint8_t>> directory = ReadWholeFile(path, 100);
  CHECK(directory.status().code() == StatusCode::kIoError);
  CHECK(directory.status().message() == path + ": cannot read: " + std::strerror(EISDIR));
  REQUIRE(::rmdir(path.c_str()) == 0);

  WriteRaw(path, "0123456789");
  Result<std::vector<uint8_t>> under_file = ReadWholeFile(path + "/child", 100);
  CHECK(under_file.status().code() == StatusCode::kIoError);  // ENOTDIR: something is there
  CHECK(under_file.status().message().find(std::strerror(ENOTDIR)) != std::string::npos);

  Result<std::vector<uint8_t>> whole = ReadWholeFile(path, 10);
  REQUIRE(whole.ok());
  CHECK(std::string(whole->begin(), whole->end()) == "0123456789");
  Result<std::vector<uint8_t>> large = ReadWholeFile(path, 9);
  CHECK(large.status().code() == StatusCode::kCorrupt);
  CHECK(large.status().message().find(path + ": 10 bytes") == 0);

  const std::string fifo = dir.File("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(ReadWholeFile(fifo, 100).status().code() == StatusCode::kFailedPrecondition);  // and does not block

  if (::geteuid() != 0) {  // root reads a mode-000 file
    REQUIRE(::chmod(path.c_str(), 0) == 0);
    Result<std::vector<uint8_t>> denied = ReadWholeFile(path, 100);
    CHECK(denied.status().code() == StatusCode::kIoError);
    CHECK(denied.status().message() == path + ": cannot open: " + std::strerror(EACCES));
    ::chmod(path.c_str(), 0600);
  }
}

}  // namespace
}  // namespace fedrt::persist
