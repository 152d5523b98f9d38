// Output folders and files of the commands that write results (`fedrt sim`'s
// --out): the folder is created with its parents, like `mkdir -p`, and every
// failure names the path and the system's reason, so `--out runs/today/ring`
// works on a fresh checkout and a read-only or mistyped path says why.
#ifndef FEDRT_RUNTIME_CLI_OUTPUT_FILES_H_
#define FEDRT_RUNTIME_CLI_OUTPUT_FILES_H_

#include <fstream>
#include <string>

#include "fedrt/platform/status.h"

namespace fedrt::cli {

// Creates `dir` and any missing parent (mode 0755, or `mode` for `dir`
// itself). An existing directory is OK; an existing file at any component,
// or a component that cannot be created, is kIoError "<component>: cannot
// create: <reason>".
Status MakeOutputDirectory(const std::string& dir, unsigned mode = 0755);

// Opens `path` for writing, truncated. On failure: kIoError "<path>: cannot
// open for writing: <reason>".
Status OpenOutputFile(const std::string& path, std::ofstream* file);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_OUTPUT_FILES_H_
