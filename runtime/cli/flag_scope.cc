#include "cli/flag_scope.h"

#include <CLI/CLI.hpp>

namespace fedrt::cli {

bool FlagGiven(const CLI::App& app, const std::string& flag) {
  const CLI::Option* option = app.get_option_no_throw(flag);
  return option != nullptr && option->count() > 0;
}

Status CheckFlagScopes(const CLI::App& app, const std::vector<FlagScope>& scopes, const std::string& run) {
  for (const FlagScope& scope : scopes) {
    if (scope.applies) continue;
    const bool given = FlagGiven(app, scope.flag);
    if (given) return InvalidArgument(scope.flag + " applies to " + scope.where + " only; this run is " + run);
  }
  return Status::Ok();
}

}  // namespace fedrt::cli
