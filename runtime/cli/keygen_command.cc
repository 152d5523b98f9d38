// `fedrt keygen`: device keys for a deployment. Writes the aggregator's key
// file and one key file per device, readable by their owner only.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/key_files.h"

namespace fedrt::cli {
namespace {

struct KeygenFlags {
  int devices = 0;
  std::string out;
  std::string prefix = "dev-";
  bool force = false;
};

int RunKeygen(const KeygenFlags& flags) {
  std::vector<std::string> ids;
  for (int i = 0; i < flags.devices; ++i) ids.push_back(flags.prefix + std::to_string(i));
  const Status written = WriteDeviceKeys(flags.out, ids, flags.force);
  if (!written.ok()) {
    std::fprintf(stderr, "fedrt keygen: %s\n", written.ToString().c_str());
    return 1;
  }
  std::printf("wrote %d device keys:\n  %s/keys.txt             for the aggregator: fedrt serve --key-file %s/keys.txt\n"
              "  %s/keys/<id>.key        for each device:    fedrt device --key-file %s/keys/%s0.key\n"
              "copy each device's file to that device only; all files are mode 0600\n",
              flags.devices, flags.out.c_str(), flags.out.c_str(), flags.out.c_str(), flags.out.c_str(),
              flags.prefix.c_str());
  return 0;
}

}  // namespace

void RegisterKeygen(CLI::App& app, CommandList& commands) {
  auto flags = std::make_shared<KeygenFlags>();
  CLI::App* keygen = app.add_subcommand("keygen", "Generate device keys: the aggregator's key file and one per device");
  keygen->add_option("--devices", flags->devices, "Number of devices")->required()->check(CLI::Range(1, 1000000));
  keygen->add_option("--out", flags->out, "Directory to write keys.txt and keys/<id>.key into")->required();
  keygen->add_option("--prefix", flags->prefix, "Device ids are <prefix><n>")->capture_default_str();
  keygen->add_flag("--force", flags->force, "Replace existing keys (devices with the old keys can no longer join)");
  commands.push_back({keygen, [flags] { return RunKeygen(*flags); }});
}

}  // namespace fedrt::cli
