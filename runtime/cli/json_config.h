// JSON option files for the tool's long-running commands (`fedrt serve`,
// `device` and `peer --config F`):
// a JSON object whose keys are the command's flag names without the dashes
// ("key-file", "max-update-norm"), with strings, numbers, booleans (flags)
// or arrays (repeatable options) as values. Every flag of the command can be
// set this way, and flags given on the command line win.
//
// The file is expanded into command-line flags before parsing, so CLI11
// checks its values exactly as it checks typed ones: an unknown key is an
// unknown flag (with a suggestion), a wrong value a usage error.
#ifndef FEDRT_RUNTIME_CLI_JSON_CONFIG_H_
#define FEDRT_RUNTIME_CLI_JSON_CONFIG_H_

#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt::cli {

// `args` are the arguments after the program name. When the first of them is
// one of `commands` and a `--config F` (or `--config=F`) follows, F's flags
// are inserted in its place, except those the command line gives itself.
// Errors (no such file, not a JSON object, a value of another type) name F.
Status ExpandJsonConfig(std::vector<std::string>* args, const std::vector<std::string>& commands);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_JSON_CONFIG_H_
