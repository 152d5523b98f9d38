// Models as NumPy .npz files: the interchange format of fedrt's models.
//
// The file holds one float32 array per tensor of the model, named and shaped
// as in its tensor table (model.h: "dense1.weight" of shape (out, in),
// "conv1.weight" of shape (filters, channels, k, k), "dense1.bias" (out,)),
// and a byte string "fedrt_model_spec" naming the model spec. In Python:
//
//   m = numpy.load("model.npz")
//   m["dense1.weight"].shape          # (300, 784) for mlp:784-300-100-10
//   m["fedrt_model_spec"].item()      # b'mlp:784-300-100-10'
//
// Reading into a model checks that every tensor of the model is there with
// its shape and that the file has no other arrays; a file that names a
// different model spec is refused. A file written elsewhere (by NumPy or
// PyTorch) may leave the spec out; then the tensors decide.
//
// Files are written atomically (temp file, fsync, rename); reading a missing
// file is kNotFound, an unreadable one kIoError. Needs zlib (npy.h); without
// it the functions return kUnsupported.
//
// Thread-safety: plain functions; one writer per path.
#ifndef FEDRT_RUNTIME_MODEL_FILE_H_
#define FEDRT_RUNTIME_MODEL_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/npy.h"

namespace fedrt {

inline constexpr char kNpzSpecMember[] = "fedrt_model_spec";

// `parameters` holds the flat parameter vector the tensor table describes.
Status WriteModelNpz(const std::string& path, const std::string& spec, const std::vector<TensorInfo>& tensors,
                     const float* parameters);
Status WriteModelNpz(const std::string& path, const Model& model);

struct ModelNpz {
  std::string spec;                // empty when the file does not name one
  std::vector<NpzMember> tensors;  // every other array, in file order
};
Result<ModelNpz> ReadModelNpz(const std::string& path);
// The same from a file's bytes; `name` prefixes errors.
Result<ModelNpz> ParseModelNpz(const uint8_t* bytes, std::size_t size, const std::string& name);

// Copies the file's tensors into `model`'s parameters; `name` (the file)
// prefixes errors. The model is left unchanged on error.
Status LoadModelNpz(const ModelNpz& file, const std::string& name, Model& model);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_MODEL_FILE_H_
