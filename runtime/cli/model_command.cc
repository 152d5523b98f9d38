// `fedrt model info|export|import`: models in and out of fedrt. A model file
// is a training checkpoint (`fedrt train --checkpoint`), an aggregator
// checkpoint (`fedrt serve --checkpoint`) or a NumPy .npz (model_file.h);
// files are told apart by their first bytes, never by their names.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/model_files.h"
#include "fedrt/runtime/checkpoint.h"
#include "fedrt/runtime/model_file.h"

namespace fedrt::cli {
namespace {

int Fail(const char* command, const Status& status) {
  std::fprintf(stderr, "fedrt model %s: %s\n", command, status.ToString().c_str());
  return 1;
}

int RunInfo(const std::string& path, const std::string& spec_hint) {
  auto loaded = LoadAnyModel(path, spec_hint);
  if (!loaded.ok()) return Fail("info", loaded.status());
  auto model = Materialize(*loaded, path);
  if (!model.ok()) return Fail("info", model.status());
  double sum_squares = 0.0;
  for (float v : loaded->parameters) sum_squares += static_cast<double>(v) * v;
  std::printf("%s: %s%s%s\n", path.c_str(), loaded->kind.c_str(), loaded->detail.empty() ? "" : ", ",
              loaded->detail.c_str());
  std::printf("model %s: %zu parameters, L2 norm %.6g\n", loaded->spec.c_str(), model->parameter_count(),
              std::sqrt(sum_squares));
  for (const TensorInfo& t : model->tensors()) {
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "x" : "") + std::to_string(t.shape[i]);
    std::printf("  %-16s %-14s %zu\n", t.name.c_str(), shape.c_str(), t.size);
  }
  return 0;
}

int RunExport(const std::string& in, const std::string& out) {
  auto loaded = LoadAnyModel(in, "");
  if (!loaded.ok()) return Fail("export", loaded.status());
  auto model = Materialize(*loaded, in);
  if (!model.ok()) return Fail("export", model.status());
  const Status written = WriteModelNpz(out, *model);
  if (!written.ok()) return Fail("export", written);
  std::printf("wrote %s: model %s, %zu tensors, %zu parameters\n", out.c_str(), loaded->spec.c_str(),
              model->tensors().size(), model->parameter_count());
  return 0;
}

int RunImport(const std::string& in, const std::string& out, const std::string& spec_hint) {
  auto loaded = LoadAnyModel(in, spec_hint);
  if (!loaded.ok()) return Fail("import", loaded.status());
  Checkpoint checkpoint;
  checkpoint.spec = loaded->spec;
  checkpoint.parameters = std::move(loaded->parameters);
  const Status written = WriteCheckpointFile(out, checkpoint);
  if (!written.ok()) return Fail("import", written);
  std::printf("wrote %s: training checkpoint of model %s at epoch 0 (fedrt train --checkpoint %s continues from it)\n",
              out.c_str(), checkpoint.spec.c_str(), out.c_str());
  return 0;
}

struct ModelFlags {
  std::string in, out, model;
};

}  // namespace

void RegisterModel(CLI::App& app, CommandList& commands) {
  CLI::App* model = app.add_subcommand("model", "Inspect and convert model files (.npz, checkpoints)");
  model->require_subcommand(1);
  auto info_flags = std::make_shared<ModelFlags>();
  CLI::App* info = model->add_subcommand("info", "Print a model file's model, tensors and state");
  info->add_option("FILE", info_flags->in, "Training or aggregator checkpoint, or .npz")->required();
  info->add_option("--model", info_flags->model, "Model spec of an .npz that does not name one");
  commands.push_back({info, [info_flags] { return RunInfo(info_flags->in, info_flags->model); }});

  auto export_flags = std::make_shared<ModelFlags>();
  CLI::App* exp = model->add_subcommand("export", "Write a checkpoint's model as .npz (numpy.load reads it)");
  exp->add_option("IN", export_flags->in, "Training or aggregator checkpoint")->required();
  exp->add_option("OUT", export_flags->out, "Output .npz")->required();
  commands.push_back({exp, [export_flags] { return RunExport(export_flags->in, export_flags->out); }});

  auto import_flags = std::make_shared<ModelFlags>();
  CLI::App* imp = model->add_subcommand("import", "Make a training checkpoint from an .npz model");
  imp->add_option("IN", import_flags->in, ".npz with one float32 array per tensor")->required();
  imp->add_option("OUT", import_flags->out, "Output checkpoint (fedrt train --checkpoint)")->required();
  imp->add_option("--model", import_flags->model, "Model spec, when the .npz does not name one");
  commands.push_back({imp, [import_flags] {
                        return RunImport(import_flags->in, import_flags->out, import_flags->model);
                      }});
}

}  // namespace fedrt::cli
