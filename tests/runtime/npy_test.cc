// NumPy interchange: .npy and .npz parsing and writing (the trust boundary
// for files from NumPy), and models as .npz.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fedrt/platform/config.h"
#include "fedrt/runtime/model_file.h"
#include "fedrt/runtime/npy.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

std::vector<uint8_t> NpyBytes(const std::string& header_dict, const std::vector<uint8_t>& data) {
  std::string header = header_dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header;
  file.append(data.begin(), data.end());
  return std::vector<uint8_t>(file.begin(), file.end());
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST_CASE("a float32 .npy is written as NumPy writes it and read back") {
  const float values[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<uint8_t> bytes = SerializeNpy(Float32Array(values, {2, 3}));
  // NumPy's own header for this array (numpy.save of a (2, 3) float32 array).
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  REQUIRE(bytes.size() == 128 + 24);
  CHECK(std::memcmp(bytes.data() + 10, header.data(), header.size()) == 0);
  CHECK(bytes[127] == '\n');
  auto parsed = ParseNpy(bytes.data(), bytes.size(), "a.npy");
  REQUIRE(parsed.ok());
  CHECK(parsed->shape == std::vector<uint64_t>{2, 3});
  auto floats = NpyFloats(*parsed, "a.npy");
  REQUIRE(floats.ok());
  CHECK(std::memcmp(floats->data(), values, sizeof values) == 0);

  const std::vector<uint8_t> one = SerializeNpy(Float32Array(values, {6}));
  const std::string one_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }";
  CHECK(std::memcmp(one.data() + 10, one_header.data(), one_header.size()) == 0);
}

TEST_CASE("arrays fedrt cannot take get a hint how to convert them") {
  const std::vector<uint8_t> eight(16, 0);
  auto f64 = ParseNpy(NpyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", eight).data(),
                      NpyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", eight).size(), "x.npy");
  REQUIRE(f64.ok());
  auto floats = NpyFloats(*f64, "x.npy");
  REQUIRE_FALSE(floats.ok());
  CHECK(Contains(floats.status(), "astype(np.float32)"));

  const std::vector<uint8_t> fortran =
      NpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::vector<uint8_t>(16, 0));
  auto f = ParseNpy(fortran.data(), fortran.size(), "f.npy");
  REQUIRE_FALSE(f.ok());
  CHECK(Contains(f.status(), "np.ascontiguousarray"));

  const std::vector<uint8_t> big = NpyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", {0, 0, 0, 0});
  auto b = ParseNpy(big.data(), big.size(), "b.npy");
  REQUIRE_FALSE(b.ok());
  CHECK(Contains(b.status(), "big-endian"));
}

TEST_CASE("damaged .npy files are refused before their data is used") {
  const float values[3] = {1, 2, 3};
  std::vector<uint8_t> bytes = SerializeNpy(Float32Array(values, {3}));
  SUBCASE("truncated data") {
    auto r = ParseNpy(bytes.data(), bytes.size() - 1, "t.npy");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kCorrupt);
  }
  SUBCASE("a header longer than the file") {
    bytes[8] = 0xff;
    auto r = ParseNpy(bytes.data(), bytes.size(), "t.npy");
    CHECK(r.status().code() == StatusCode::kCorrupt);
  }
  SUBCASE("a shape whose product overflows") {
    const std::vector<uint8_t> huge =
        NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", {});
    auto r = ParseNpy(huge.data(), huge.size(), "h.npy");
    CHECK(r.status().code() == StatusCode::kCorrupt);
  }
  SUBCASE("not a .npy at all") {
    const uint8_t text[] = "hello world";
    CHECK_FALSE(LooksLikeNpy(text, sizeof text));
    CHECK(ParseNpy(text, sizeof text, "x").status().code() == StatusCode::kCorrupt);
  }
}

#if FEDRT_HAVE_ZLIB
TEST_CASE(".npz archives round-trip and a damaged member is caught by its CRC") {
  const float a[4] = {1, 2, 3, 4};
  const float b[2] = {-1, 0.5f};
  auto bytes = SerializeNpz({{"a", Float32Array(a, {2, 2})}, {"layer.b", Float32Array(b, {2})}});
  REQUIRE(bytes.ok());
  CHECK(LooksLikeZip(bytes->data(), bytes->size()));
  auto members = ParseNpz(bytes->data(), bytes->size(), "m.npz");
  REQUIRE(members.ok());
  REQUIRE(members->size() == 2);
  CHECK((*members)[0].name == "a");
  CHECK((*members)[1].name == "layer.b");
  CHECK((*members)[1].array.shape == std::vector<uint64_t>{2});
  CHECK(*NpyFloats((*members)[1].array, "b") == std::vector<float>{-1, 0.5f});

  std::vector<uint8_t> damaged = *bytes;
  damaged[170] ^= 0x40;  // inside the first member's data (30 + 5 + 128 = 163 on)
  auto r = ParseNpz(damaged.data(), damaged.size(), "m.npz");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kCorrupt);

  auto cut = ParseNpz(bytes->data(), bytes->size() - 30, "m.npz");
  CHECK(cut.status().code() == StatusCode::kCorrupt);
}

TEST_CASE("a model saved as .npz loads into the same model and is refused by another") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  auto model = Model::Create("mlp:20-8-3", 7);
  REQUIRE(model.ok());
  const std::string path = dir.File("m.npz");
  REQUIRE(WriteModelNpz(path, *model).ok());
  auto file = ReadModelNpz(path);
  REQUIRE(file.ok());
  CHECK(file->spec == "mlp:20-8-3");
  CHECK(file->tensors.size() == 4);

  auto other = Model::Create("mlp:20-8-3", 8);
  REQUIRE(other.ok());
  REQUIRE(LoadModelNpz(*file, path, *other).ok());
  CHECK(std::memcmp(other->parameters(), model->parameters(), model->parameter_count() * sizeof(float)) == 0);

  auto wider = Model::Create("mlp:20-9-3", 8);
  REQUIRE(wider.ok());
  const Status refused = LoadModelNpz(*file, path, *wider);
  CHECK_FALSE(refused.ok());
  CHECK(Contains(refused, "mlp:20-8-3"));

  file->spec.clear();  // a file from NumPy without the spec: the shapes decide
  const Status shapes = LoadModelNpz(*file, path, *wider);
  CHECK_FALSE(shapes.ok());
  CHECK(Contains(shapes, "'dense1.weight' has shape (8, 20), model 'mlp:20-9-3' needs (9, 20)"));

  CHECK(ReadModelNpz(dir.File("missing.npz")).status().code() == StatusCode::kNotFound);
}
#endif

}  // namespace
}  // namespace fedrt
