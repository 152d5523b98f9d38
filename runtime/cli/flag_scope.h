// Options that apply to some runs only. An option given for a run it does
// not configure is an error naming why (`fedrt peer --reduce dense
// --density 0.01` would otherwise print a density and send dense fp32),
// never silently ignored. Options left at their defaults are fine.
#ifndef FEDRT_RUNTIME_CLI_FLAG_SCOPE_H_
#define FEDRT_RUNTIME_CLI_FLAG_SCOPE_H_

#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace CLI {
class App;
}

namespace fedrt::cli {

struct FlagScope {
  std::string flag;   // "--density"
  bool applies;       // to this run
  std::string where;  // what it applies to: "--reduce iwp"
};

// kInvalidArgument for the first option of `scopes` that was given (on
// `app`'s command line or in its --config file, which is expanded into flags
// before parsing) and does not apply: "--density applies to --reduce iwp
// only; this run is --reduce dense".
Status CheckFlagScopes(const CLI::App& app, const std::vector<FlagScope>& scopes, const std::string& run);

// True when `flag` was given on `app`'s command line.
bool FlagGiven(const CLI::App& app, const std::string& flag);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_FLAG_SCOPE_H_
