#include "cli/model_files.h"

#include <cstring>

#include "cli/float_files.h"
#include "fedrt/runtime/checkpoint.h"
#include "fedrt/runtime/model_file.h"
#include "src/star/aggregator_checkpoint.h"

namespace fedrt::cli {
namespace {

bool StartsWith(const std::vector<uint8_t>& bytes, const char* magic) {
  const std::size_t n = std::strlen(magic);
  return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
}

}  // namespace

Result<LoadedModel> LoadAnyModel(const std::string& path, const std::string& spec_hint) {
  // The magic decides; each format's reader then reads the file once.
  auto head = ReadBytes(path, 8);
  FEDRT_RETURN_IF_ERROR(head.status());
  LoadedModel loaded;
  if (StartsWith(*head, "FEDRTCKP") || StartsWith(*head, "FEDRTAGG")) {
    auto checkpoint = ReadAnyCheckpointFile(path);
    FEDRT_RETURN_IF_ERROR(checkpoint.status());
    loaded.spec = checkpoint->spec;
    if (checkpoint->aggregator_state.empty()) {
      loaded.kind = "training checkpoint";
    } else {
      auto state = AggregatorStateOf(*checkpoint, path);
      FEDRT_RETURN_IF_ERROR(state.status());
      loaded.kind = "aggregator checkpoint";
      loaded.detail = std::to_string(state->round) + " rounds done" +
                      (state->codec.empty() ? "" : ", codec " + state->codec) + "; ";
    }
    loaded.detail += "epoch " + std::to_string(checkpoint->epoch) + ", step " + std::to_string(checkpoint->step) +
                     (checkpoint->velocity.empty() ? "" : ", with momentum");
    loaded.parameters = std::move(checkpoint->parameters);
  } else {
    auto file = ReadModelNpz(path);
    FEDRT_RETURN_IF_ERROR(file.status());
    loaded.kind = ".npz";
    loaded.spec = file->spec.empty() ? spec_hint : file->spec;
    if (loaded.spec.empty()) {
      return InvalidArgument(path + " does not name its model: give it with --model SPEC");
    }
    if (!spec_hint.empty() && spec_hint != loaded.spec) {
      return InvalidArgument(path + " holds model '" + loaded.spec + "', --model says '" + spec_hint + "'");
    }
    auto model = Model::Create(loaded.spec, 0);
    FEDRT_RETURN_IF_ERROR(model.status());
    FEDRT_RETURN_IF_ERROR(LoadModelNpz(*file, path, *model));
    loaded.parameters.assign(model->parameters(), model->parameters() + model->parameter_count());
    loaded.detail = file->spec.empty() ? "model spec from --model" : "";
    return loaded;
  }
  if (!spec_hint.empty() && spec_hint != loaded.spec) {
    return InvalidArgument(path + " holds model '" + loaded.spec + "', --model says '" + spec_hint + "'");
  }
  return loaded;
}

Result<Model> Materialize(const LoadedModel& loaded, const std::string& path) {
  auto model = Model::Create(loaded.spec, 0);
  FEDRT_RETURN_IF_ERROR(model.status());
  if (model->parameter_count() != loaded.parameters.size()) {
    return Corrupt(path + ": " + std::to_string(loaded.parameters.size()) + " parameters, model '" + loaded.spec +
                   "' has " + std::to_string(model->parameter_count()));
  }
  std::memcpy(model->parameters(), loaded.parameters.data(), loaded.parameters.size() * sizeof(float));
  return model;
}

}  // namespace fedrt::cli
