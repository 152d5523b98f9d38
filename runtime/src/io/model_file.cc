// Models as .npz files; see fedrt/runtime/model_file.h.
#include "fedrt/runtime/model_file.h"

#include <cstring>

#include "persist/file.h"

namespace fedrt {
namespace {

// The largest .npz fedrt reads: a model of kMaxCheckpointFloats (checkpoint.h)
// with room for the headers.
constexpr std::size_t kMaxModelFileBytes = (std::size_t{1} << 30) + (1 << 20);

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

Status WriteModelNpz(const std::string& path, const std::string& spec, const std::vector<TensorInfo>& tensors,
                     const float* parameters) {
  std::vector<NpzMember> members;
  for (const TensorInfo& t : tensors) {
    std::vector<uint64_t> shape(t.shape.begin(), t.shape.end());
    members.push_back({t.name, Float32Array(parameters + t.offset, std::move(shape))});
  }
  members.push_back({kNpzSpecMember, BytesScalar(spec)});
  auto bytes = SerializeNpz(members);
  if (!bytes.ok()) return Status(bytes.status().code(), path + ": " + bytes.status().message());
  return persist::WriteFileAtomically(path, *bytes);
}

Status WriteModelNpz(const std::string& path, const Model& model) {
  return WriteModelNpz(path, model.spec().text, model.tensors(), model.parameters());
}

Result<ModelNpz> ReadModelNpz(const std::string& path) {
  auto bytes = persist::ReadWholeFile(path, kMaxModelFileBytes);
  FEDRT_RETURN_IF_ERROR(bytes.status());
  return ParseModelNpz(bytes->data(), bytes->size(), path);
}

Result<ModelNpz> ParseModelNpz(const uint8_t* bytes, std::size_t size, const std::string& path) {
  if (!LooksLikeZip(bytes, size)) {
    return InvalidArgument(path + ": not a .npz file (a model file is a ZIP archive of .npy arrays, "
                                  "as numpy.savez writes it)");
  }
  auto members = ParseNpz(bytes, size, path);
  FEDRT_RETURN_IF_ERROR(members.status());
  ModelNpz file;
  for (NpzMember& m : *members) {
    if (m.name == kNpzSpecMember) {
      if (m.array.type != NpyType::kBytes || m.array.count() != 1) {
        return Corrupt(path + ": '" + kNpzSpecMember + "' is not a byte string");
      }
      file.spec.assign(m.array.data.begin(), m.array.data.end());
      file.spec.resize(std::strlen(file.spec.c_str()));  // NumPy pads byte strings with NULs
      continue;
    }
    file.tensors.push_back(std::move(m));
  }
  return file;
}

Status LoadModelNpz(const ModelNpz& file, const std::string& name, Model& model) {
  if (!file.spec.empty() && file.spec != model.spec().text) {
    return InvalidArgument(name + " holds model '" + file.spec + "', this run uses '" + model.spec().text + "'");
  }
  std::vector<std::vector<float>> values;
  for (const TensorInfo& t : model.tensors()) {
    const NpzMember* found = nullptr;
    for (const NpzMember& m : file.tensors) {
      if (m.name == t.name) found = &m;
    }
    const std::vector<uint64_t> want(t.shape.begin(), t.shape.end());
    if (found == nullptr) {
      return InvalidArgument(name + " has no array '" + t.name + "' (shape " + ShapeText(want) + ") for model '" +
                             model.spec().text + "'");
    }
    if (found->array.shape != want) {
      return InvalidArgument(name + ": '" + t.name + "' has shape " + ShapeText(found->array.shape) +
                             ", model '" + model.spec().text + "' needs " + ShapeText(want));
    }
    auto floats = NpyFloats(found->array, name + ": " + t.name);
    FEDRT_RETURN_IF_ERROR(floats.status());
    values.push_back(std::move(*floats));
  }
  for (const NpzMember& m : file.tensors) {
    bool known = false;
    for (const TensorInfo& t : model.tensors()) known = known || t.name == m.name;
    if (!known) return InvalidArgument(name + " has an array '" + m.name + "' that model '" + model.spec().text + "' lacks");
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    const TensorInfo& t = model.tensors()[i];
    std::memcpy(model.parameters() + t.offset, values[i].data(), t.size * sizeof(float));
  }
  return Status::Ok();
}

}  // namespace fedrt
