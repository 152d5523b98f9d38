// A device loads only its share of the training set (star_data.h): the same
// examples, labels, class count and normalisation bits as cutting the share
// out of the whole set, for every partition kind. Data: the tiny IDX fixture.
#include <doctest/doctest.h>

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fedrt/runtime/dataset.h"
#include "star/star_data.h"

namespace fedrt {
namespace {

const std::string kDir = FEDRT_TINY_IDX_DIR;

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST_CASE("a device's share loaded alone equals the share cut from the whole normalised set") {
  Result<TrainTestData> whole = star::LoadNormalized(kDir);
  REQUIRE(whole.ok());
  const std::size_t size = whole->train.example_size();
  for (const char* partition : {"iid", "dirichlet:0.5", "shards:2"}) {
    for (int index = 0; index < 3; ++index) {
      INFO(partition << " share " << index << " of 3");
      Result<std::vector<uint32_t>> cut = star::DeviceShare(whole->train, partition, 3, index, 11);
      REQUIRE(cut.ok());
      Result<star::DeviceData> alone = star::LoadDeviceShare(kDir, partition, 3, index, 11);
      REQUIRE(alone.ok());
      const Dataset& d = alone->data;
      REQUIRE(d.count == cut->size());
      REQUIRE(alone->share.size() == cut->size());
      CHECK(d.num_classes == whole->train.num_classes);
      CHECK(d.example_size() == size);
      CHECK(SameBits(d.normalization.mean, whole->train.normalization.mean));
      CHECK(SameBits(d.normalization.stddev, whole->train.normalization.stddev));
      CHECK(d.pixels.size() == d.count * size);
      bool same = true;
      for (std::size_t i = 0; i < cut->size(); ++i) {
        const uint32_t row = (*cut)[i];
        same = same && alone->share[i] == i && d.labels[i] == whole->train.labels[row] &&
               std::memcmp(d.pixels.data() + i * size, whole->train.pixels.data() + row * size, size) == 0;
      }
      CHECK(same);
      CHECK(DataView(d).Validate().ok());
    }
  }
  CHECK(star::LoadDeviceShare(kDir, "iid", 3, 3, 11).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a device's share from a truncated or missing image file is an error naming the file") {
  const std::string dir = kDir + "/truncated-share";
  REQUIRE(std::system(("mkdir -p '" + dir + "' && cp '" + kDir + "'/*labels* '" + dir + "'/").c_str()) == 0);
  // The tiny set's first 100 images of 256.
  Result<IdxArray> images = ReadIdxFile(kDir + "/train-images-idx3-ubyte.gz");
  REQUIRE(images.ok());
  std::vector<uint8_t> bytes = {0, 0, 8, 3, 0, 0, 1, 0, 0, 0, 0, 28, 0, 0, 0, 28};
  bytes.insert(bytes.end(), images->data.begin(), images->data.begin() + 100 * 28 * 28);
  gzFile f = gzopen((dir + "/train-images-idx3-ubyte.gz").c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
  Result<star::DeviceData> truncated = star::LoadDeviceShare(dir, "iid", 2, 0, 1);
  CHECK(truncated.status().code() == StatusCode::kCorrupt);
  CHECK(truncated.status().message().find("truncated") != std::string::npos);
  CHECK(truncated.status().message().find("train-images") != std::string::npos);
  REQUIRE(std::remove((dir + "/train-images-idx3-ubyte.gz").c_str()) == 0);
  CHECK(star::LoadDeviceShare(dir, "iid", 2, 0, 1).status().code() == StatusCode::kNotFound);
}

}  // namespace
}  // namespace fedrt
