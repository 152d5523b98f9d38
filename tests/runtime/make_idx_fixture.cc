// Writes a tiny MNIST-style data set (the four gzip IDX files) into the
// directory given as the only argument, for the `fedrt train` tests:
// 256 training and 64 test images of 28 x 28 pixels in 10 classes, where
// class c is a bright horizontal bar at rows 2c..2c+3 on faint noise.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

bool WriteIdx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0}) bytes.push_back(static_cast<uint8_t>(d >> shift));
  }
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size());
  return gzclose(f) == Z_OK && ok;
}

bool WriteSet(const std::string& dir, const char* prefix, uint32_t count, uint32_t seed) {
  std::vector<uint8_t> images(static_cast<std::size_t>(count) * 28 * 28), labels(count);
  uint32_t x = seed;
  for (uint32_t n = 0; n < count; ++n) {
    const uint32_t label = n % 10;
    labels[n] = static_cast<uint8_t>(label);
    for (uint32_t r = 0; r < 28; ++r) {
      for (uint32_t c = 0; c < 28; ++c) {
        x = x * 1664525u + 1013904223u;
        const bool bar = r >= 2 * label + 4 && r < 2 * label + 8;
        images[(static_cast<std::size_t>(n) * 28 + r) * 28 + c] = static_cast<uint8_t>((bar ? 160 : 0) + (x >> 27));
      }
    }
  }
  return WriteIdx(dir + "/" + prefix + "-images-idx3-ubyte.gz", {count, 28, 28}, images) &&
         WriteIdx(dir + "/" + prefix + "-labels-idx1-ubyte.gz", {count}, labels);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_idx_fixture DIR\n");
    return 2;
  }
  if (!WriteSet(argv[1], "train", 256, 1) || !WriteSet(argv[1], "t10k", 64, 2)) {
    std::fprintf(stderr, "make_idx_fixture: cannot write into %s\n", argv[1]);
    return 1;
  }
  return 0;
}
