// Device keys for the star and peer topologies: fresh 256-bit keys from the
// system's random source, written as '<id> <hex>' lines to files only their
// owner may read (0600, directories 0700). Used by `fedrt keygen`, `fedrt sim`
// and the local peer launcher, so every generated key file looks the same.
#ifndef FEDRT_RUNTIME_CLI_KEY_FILES_H_
#define FEDRT_RUNTIME_CLI_KEY_FILES_H_

#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt::cli {

// "<id> <64 hex digits>\n" with a new random key.
Result<std::string> NewKeyLine(const std::string& id);

// Writes `text` to `path` with mode 0600 (also when the file existed).
Status WritePrivateFile(const std::string& path, const std::string& text);

// <dir>/keys.txt with every id's line (the aggregator's key file) and
// <dir>/keys/<id>.key with each id's own line (each device's). `dir` is
// created (0700) if missing. With `overwrite` false an existing keys.txt is
// kFailedPrecondition: regenerating keys locks out every deployed device.
Status WriteDeviceKeys(const std::string& dir, const std::vector<std::string>& ids, bool overwrite);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_KEY_FILES_H_
