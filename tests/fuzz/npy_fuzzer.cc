// libFuzzer target: the NumPy readers (runtime/npy.h, model_file.h), fed
// arbitrary bytes: a .npy array (ParseNpy, then NpyFloats), a .npz archive
// (ParseNpz, stored and deflated members) and a model .npz loaded into a
// small model (ParseModelNpz, LoadModelNpz). The first byte picks the
// reader (fuzz_support.h); the rest is the file. A reader may refuse the
// bytes; it must not crash, overflow or hit undefined behaviour; an array
// it accepts holds as many bytes as its shape says, and a model load that
// fails leaves the model as it was.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fedrt/runtime/model.h"
#include "fedrt/runtime/model_file.h"
#include "fedrt/runtime/npy.h"
#include "fuzz_support.h"

namespace {

using fedrt::fuzz::NpyReader;

void CheckArray(const fedrt::NpyArray& array) {
  if (array.count() * array.item_size != array.data.size()) std::abort();
  (void)fedrt::NpyFloats(array, "fuzz.npy");
}

fedrt::Model& SmallModel() {
  static auto* model = [] {
    auto created = fedrt::Model::Create(fedrt::fuzz::kNpyModelSpec, 1);
    if (!created.ok()) std::abort();
    return new fedrt::Model(std::move(*created));
  }();
  return *model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const uint8_t* file = data + 1;
  const std::size_t file_size = size - 1;
  switch (static_cast<NpyReader>(data[0] & 3)) {
    case NpyReader::kNpy: {
      (void)fedrt::LooksLikeNpy(file, file_size);
      auto array = fedrt::ParseNpy(file, file_size, "fuzz.npy");
      if (array.ok()) CheckArray(*array);
      break;
    }
    case NpyReader::kNpz: {
      (void)fedrt::LooksLikeZip(file, file_size);
      auto members = fedrt::ParseNpz(file, file_size, "fuzz.npz");
      if (members.ok()) {
        for (const fedrt::NpzMember& member : *members) CheckArray(member.array);
      }
      break;
    }
    case NpyReader::kModelNpz: {
      auto parsed = fedrt::ParseModelNpz(file, file_size, "fuzz.npz");
      if (!parsed.ok()) break;
      fedrt::Model& model = SmallModel();
      const std::vector<float> before(model.parameters(), model.parameters() + model.parameter_count());
      if (!fedrt::LoadModelNpz(*parsed, "fuzz.npz", model).ok() &&
          std::memcmp(before.data(), model.parameters(), before.size() * sizeof(float)) != 0) {
        std::abort();  // a refused file must leave the model unchanged
      }
      break;
    }
    default: break;
  }
  return 0;
}
