// Model files the tool reads: a training checkpoint, an aggregator
// checkpoint or a NumPy .npz (fedrt/runtime/model_file.h), told apart by their
// first bytes. Used by `fedrt model` and every command's --init-model.
#ifndef FEDRT_RUNTIME_CLI_MODEL_FILES_H_
#define FEDRT_RUNTIME_CLI_MODEL_FILES_H_

#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/model.h"

namespace fedrt::cli {

struct LoadedModel {
  std::string kind;  // "training checkpoint", "aggregator checkpoint", ".npz"
  std::string spec;
  std::vector<float> parameters;
  std::string detail;  // epoch and step, or rounds
};

// `spec_hint` (may be empty): the model an .npz without a spec holds, and a
// check against the spec a file names (a mismatch is an error).
Result<LoadedModel> LoadAnyModel(const std::string& path, const std::string& spec_hint);

// A model of `loaded`'s spec with its parameters in place.
Result<Model> Materialize(const LoadedModel& loaded, const std::string& path);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_MODEL_FILES_H_
