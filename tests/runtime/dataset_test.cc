#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "fedrt/platform/config.h"
#include "fedrt/runtime/dataset.h"
#include "temp_dir.h"

#if FEDRT_HAVE_ZLIB
#include <zlib.h>
#endif

namespace fedrt {
namespace {

// An IDX file of unsigned bytes with the given dimensions; `payload` values
// cycle through 0..250 unless given.
std::vector<uint8_t> Idx(const std::vector<uint32_t>& dims, std::vector<uint8_t> payload = {}) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  std::size_t count = 1;
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(d >> shift));
    count *= d;
  }
  if (payload.empty()) {
    for (std::size_t i = 0; i < count; ++i) payload.push_back(static_cast<uint8_t>(i % 251));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void WritePlain(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
}

#if FEDRT_HAVE_ZLIB
void WriteGzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::vector<uint8_t> bytes;
  FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  int ch;
  while ((ch = std::fgetc(f)) != EOF) bytes.push_back(static_cast<uint8_t>(ch));
  std::fclose(f);
  return bytes;
}

TEST_CASE("the idx reader loads gzip and plain files with the same contents") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::vector<uint8_t> bytes = Idx({3, 4, 5});
  WritePlain(dir.File("plain.idx"), bytes);
  WriteGzip(dir.File("packed.idx.gz"), bytes);
  Result<IdxArray> plain = ReadIdxFile(dir.File("plain.idx"));
  Result<IdxArray> packed = ReadIdxFile(dir.File("packed.idx.gz"));
  REQUIRE(plain.ok());
  REQUIRE(packed.ok());
  CHECK(plain->dims == std::vector<uint32_t>{3, 4, 5});
  CHECK(plain->data.size() == 60);
  CHECK(plain->data[59] == 59);
  CHECK(packed->dims == plain->dims);
  CHECK(packed->data == plain->data);
}
#else
// Without zlib the loaders read plain files under the same names.
void WriteGzip(const std::string& path, const std::vector<uint8_t>& bytes) { WritePlain(path, bytes); }

TEST_CASE("without zlib a gzip idx file is refused by name and a plain one is read") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  WritePlain(dir.File("plain.idx"), Idx({3, 4, 5}));
  Result<IdxArray> plain = ReadIdxFile(dir.File("plain.idx"));
  REQUIRE(plain.ok());
  CHECK(plain->data.size() == 60);
  const std::vector<uint8_t> gzip_header = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3};
  WritePlain(dir.File("packed.idx.gz"), gzip_header);
  Result<IdxArray> packed = ReadIdxFile(dir.File("packed.idx.gz"));
  CHECK(packed.status().code() == StatusCode::kUnsupported);
  CHECK(packed.status().message().find("packed.idx.gz") != std::string::npos);
}
#endif

TEST_CASE("a missing idx file is reported as not found with its name") {
  Result<IdxArray> missing = ReadIdxFile("/nonexistent/fedrt/train-images-idx3-ubyte.gz");
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find("/nonexistent/fedrt/train-images-idx3-ubyte.gz") != std::string::npos);
}

TEST_CASE("truncated idx files are rejected with the file named") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  std::vector<uint8_t> bytes = Idx({10, 8, 8});
  bytes.resize(bytes.size() - 7);
  WritePlain(dir.File("short.idx"), bytes);
  Result<IdxArray> plain = ReadIdxFile(dir.File("short.idx"));
  CHECK(plain.status().code() == StatusCode::kCorrupt);
  CHECK(plain.status().message().find("short.idx") != std::string::npos);
  CHECK(plain.status().message().find("truncated") != std::string::npos);

#if FEDRT_HAVE_ZLIB
  // A gzip stream cut in the middle.
  WriteGzip(dir.File("whole.gz"), Idx({100, 28, 28}));
  std::vector<uint8_t> gz = ReadAll(dir.File("whole.gz"));
  gz.resize(gz.size() / 2);
  WritePlain(dir.File("cut.gz"), gz);
  Result<IdxArray> cut = ReadIdxFile(dir.File("cut.gz"));
  CHECK(cut.status().code() == StatusCode::kCorrupt);
  CHECK(cut.status().message().find("cut.gz") != std::string::npos);
#endif

  for (std::size_t size : {0u, 3u, 9u}) {
    std::vector<uint8_t> header = Idx({2, 2});
    header.resize(size);
    CHECK(ParseIdx(header.data(), header.size(), "x.idx").status().code() == StatusCode::kCorrupt);
  }
}

TEST_CASE("foreign files, other element types and extra bytes are rejected") {
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  CHECK(ParseIdx(text.data(), text.size(), "hello.txt").status().message().find("hello.txt: not an IDX") == 0);
  std::vector<uint8_t> floats = Idx({2});
  floats[2] = 0x0D;
  CHECK(ParseIdx(floats.data(), floats.size(), "f.idx").status().message().find("element type 13") != std::string::npos);
  std::vector<uint8_t> zero_dims = Idx({2});
  zero_dims[3] = 0;
  CHECK_FALSE(ParseIdx(zero_dims.data(), zero_dims.size(), "z.idx").ok());
  std::vector<uint8_t> longer = Idx({2, 2});
  longer.push_back(1);
  CHECK(ParseIdx(longer.data(), longer.size(), "l.idx").status().code() == StatusCode::kCorrupt);
  // Dimensions whose product overflows the size limit.
  const std::vector<uint8_t> huge = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  CHECK(ParseIdx(huge.data(), huge.size(), "h.idx").status().code() == StatusCode::kCorrupt);
}

TEST_CASE("an image set and a label set with different counts are rejected") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  WriteGzip(dir.File("images.gz"), Idx({5, 2, 3}));
  WriteGzip(dir.File("labels.gz"), Idx({4}, {0, 1, 2, 3}));
  Result<Dataset> data = LoadIdxDataset(dir.File("images.gz"), dir.File("labels.gz"));
  CHECK(data.status().code() == StatusCode::kCorrupt);
  CHECK(data.status().message().find("4 labels for 5 images") != std::string::npos);
  // Labels given where images are expected.
  CHECK_FALSE(LoadIdxDataset(dir.File("labels.gz"), dir.File("labels.gz")).ok());
}

TEST_CASE("an mnist-style directory loads, scales pixels to the unit interval and normalises") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  WriteGzip(dir.File("train-images-idx3-ubyte.gz"), Idx({6, 2, 2}));
  WriteGzip(dir.File("train-labels-idx1-ubyte.gz"), Idx({6}, {0, 1, 2, 0, 1, 2}));
  WriteGzip(dir.File("t10k-images-idx3-ubyte.gz"), Idx({2, 2, 2}, {0, 255, 0, 255, 255, 0, 255, 0}));
  WriteGzip(dir.File("t10k-labels-idx1-ubyte.gz"), Idx({2}, {3, 1}));
  Result<TrainTestData> data = LoadMnistStyleDirectory(dir.path());
  REQUIRE(data.ok());
  CHECK(data->train.count == 6);
  CHECK(data->train.example_size() == 4);
  CHECK(data->train.pixels[1] == 1);
  CHECK(data->test.pixels[1] == 255);
  float first[4];
  ReadExamples(data->train, 0, 1, first);
  CHECK(first[1] == 1.0f / 255.0f);
  ReadExamples(data->test, 0, 1, first);
  CHECK(first[1] == 1.0f);
  CHECK(data->train.num_classes == 4);  // the test set's label 3 counts too
  Dataset& train = data->train;
  const Normalization n = ComputeNormalization(train);
  Normalize(train, n);
  const Normalization after = ComputeNormalization(train);
  CHECK(after.mean == doctest::Approx(0.0).epsilon(1e-5).scale(1));
  CHECK(after.stddev == doctest::Approx(1.0).epsilon(1e-4));
  // Normalising replaces, it does not stack, and the bytes stay as they were.
  Normalize(train, n);
  CHECK(ComputeNormalization(train).mean == after.mean);
  CHECK(train.pixels[1] == 1);

  Result<TrainTestData> missing = LoadMnistStyleDirectory(dir.File("absent"));
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find("train-images-idx3-ubyte.gz") != std::string::npos);
}

TEST_CASE("an mnist-style directory of gunzipped files loads in every build, the build's form first") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  WritePlain(dir.File("train-images-idx3-ubyte"), Idx({6, 2, 2}));
  WritePlain(dir.File("train-labels-idx1-ubyte"), Idx({6}, {0, 1, 2, 0, 1, 2}));
  WritePlain(dir.File("t10k-images-idx3-ubyte"), Idx({2, 2, 2}));
  WritePlain(dir.File("t10k-labels-idx1-ubyte"), Idx({2}, {3, 1}));
  Result<TrainTestData> data = LoadMnistStyleDirectory(dir.path());
  REQUIRE_MESSAGE(data.ok(), data.status().ToString());
  CHECK(data->train.count == 6);
  CHECK(data->test.count == 2);
  // A second training set beside it, gzipped (gunzip -k leaves both): a
  // build with zlib takes the .gz, one without the plain file.
  WriteGzip(dir.File("train-images-idx3-ubyte.gz"), Idx({5, 2, 2}));
  WriteGzip(dir.File("train-labels-idx1-ubyte.gz"), Idx({5}, {0, 1, 2, 0, 1}));
  data = LoadMnistStyleDirectory(dir.path());
  REQUIRE_MESSAGE(data.ok(), data.status().ToString());
  CHECK(data->train.count == (FEDRT_HAVE_ZLIB ? 5u : 6u));
}

TEST_CASE("shuffled indices are a permutation that depends only on seed and epoch") {
  const std::vector<uint32_t> a = ShuffledIndices(1000, 5, 0);
  CHECK(a == ShuffledIndices(1000, 5, 0));
  CHECK(a != ShuffledIndices(1000, 5, 1));
  CHECK(a != ShuffledIndices(1000, 6, 0));
  CHECK(std::set<uint32_t>(a.begin(), a.end()).size() == 1000);
  CHECK(*std::max_element(a.begin(), a.end()) == 999);
}

TEST_CASE("gather batch copies the chosen examples and labels") {
  Dataset data;
  data.count = 3;
  data.width = 2;
  data.pixels = {0, 255, 10, 11, 51, 21};
  data.labels = {7, 8, 9};
  const uint32_t pick[2] = {2, 0};
  float x[4];
  uint8_t y[2];
  GatherBatch(data, pick, 2, x, y);
  CHECK(x[0] == 51.0f * (1.0f / 255.0f));
  CHECK(x[2] == 0.0f);
  CHECK(x[3] == 1.0f);
  CHECK(y[0] == 9);
  CHECK(y[1] == 7);
}

TEST_CASE("features read per batch equal a normalised float copy bit for bit") {
  // What the data set held before it kept bytes: v / 255 as float, then
  // (x - mean) * (1 / stddev), each step rounded to float.
  Dataset data;
  data.count = 256;
  data.pixels.resize(256);
  for (int v = 0; v < 256; ++v) data.pixels[static_cast<std::size_t>(v)] = static_cast<uint8_t>(255 - v);
  data.labels.assign(256, 0);
  std::vector<float> copy(256);
  for (std::size_t i = 0; i < 256; ++i) copy[i] = static_cast<float>(data.pixels[i]) * (1.0f / 255.0f);
  const Normalization n = ComputeNormalization(data);
  const float scale = 1.0f / n.stddev;
  for (float& x : copy) x = (x - n.mean) * scale;
  Normalize(data, n);
  std::vector<float> read(256);
  ReadExamples(data, 0, 256, read.data());
  CHECK(std::memcmp(read.data(), copy.data(), sizeof(float) * 256) == 0);
  std::vector<uint32_t> all(256);
  for (uint32_t i = 0; i < 256; ++i) all[i] = 255 - i;
  std::vector<uint8_t> labels(256);
  GatherBatch(data, all.data(), 256, read.data(), labels.data());
  CHECK(read[0] == copy[255]);
  CHECK(read[255] == copy[0]);
}

TEST_CASE("the installed fashion-mnist set loads when present") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  FILE* probe = std::fopen((dir + "/t10k-labels-idx1-ubyte.gz").c_str(), "rb");
  if (probe == nullptr) {
    MESSAGE("skipped: " << dir << " is not installed");
    return;
  }
  std::fclose(probe);
  Result<Dataset> test = LoadIdxDataset(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
#if !FEDRT_HAVE_ZLIB
  // Debian ships the set gzip-compressed: a build without zlib says so.
  CHECK(test.status().code() == StatusCode::kUnsupported);
  return;
#endif
  REQUIRE(test.ok());
  CHECK(test->count == 10000);
  CHECK(test->height == 28);
  CHECK(test->width == 28);
  CHECK(test->num_classes == 10);
}

}  // namespace
}  // namespace fedrt
