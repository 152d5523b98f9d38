// Subcommands of the `fedrt` tool. Each Register* function adds a CLI11
// subcommand and the function that runs it; main.cc runs the parsed one.
#ifndef FEDRT_RUNTIME_CLI_COMMANDS_H_
#define FEDRT_RUNTIME_CLI_COMMANDS_H_

#include <functional>
#include <vector>

namespace CLI {
class App;
}

namespace fedrt::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;  // exit status
};
using CommandList = std::vector<Command>;

void RegisterInfo(CLI::App& app, CommandList& commands);
void RegisterCodec(CLI::App& app, CommandList& commands);
void RegisterBench(CLI::App& app, CommandList& commands);
void RegisterTrain(CLI::App& app, CommandList& commands);
// `fedrt model info|export|import`.
void RegisterModel(CLI::App& app, CommandList& commands);
// `fedrt peer` and `fedrt bench allreduce` (after RegisterBench).
void RegisterPeer(CLI::App& app, CommandList& commands);
void RegisterServe(CLI::App& app, CommandList& commands);
void RegisterDevice(CLI::App& app, CommandList& commands);
void RegisterSim(CLI::App& app, CommandList& commands);
// `fedrt keygen`.
void RegisterKeygen(CLI::App& app, CommandList& commands);
// `fedrt bench train` (RegisterTrain calls it, after RegisterBench).
void RegisterTrainBench(CLI::App& app, CommandList& commands);
// `fedrt bench fleet` (after RegisterBench).
void RegisterFleetBench(CLI::App& app, CommandList& commands);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_COMMANDS_H_
