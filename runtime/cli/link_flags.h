// `fedrt sim --link` and `--link-file`: one link profile per device
// (transport/link_profile.h has the profile's text form).
//
// A link file has one `<who> <profile>` line per group of devices; blank
// lines and `#` comments are ignored:
//
//   # 70% of the fleet on 10 Mbit/s, 30% on 1 Mbit/s; device 0 on LTE-M
//   0     375kbit,delay=100ms,down=300kbit
//   70%   10mbit,delay=20ms
//   30%   1mbit,delay=50ms
//
// `<who>` is a device index (`3`: dev-3), a range of indices (`0-3`), or a
// share of the fleet (`70%`). Devices named by index get their line's
// profile; the shares then divide the other devices, in index order and in
// the file's order of lines, by largest remainder (70% and 30% of 8 devices
// are 6 and 2). Shares must add up to 100%, a device may be named once, and
// every device must end up with a profile.
//
// Thread-safety: pure functions.
#ifndef FEDRT_RUNTIME_CLI_LINK_FLAGS_H_
#define FEDRT_RUNTIME_CLI_LINK_FLAGS_H_

#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/transport/link_profile.h"

namespace fedrt::cli {

// The profiles of `devices` devices from a link file's text; errors name the
// line (`line 3: ...`).
Result<std::vector<transport::LinkProfile>> ParseLinkFile(const std::string& text, int devices);
// From --link (every device the same) or --link-file (read here); both empty:
// an empty list (no shaping).
Result<std::vector<transport::LinkProfile>> FleetLinks(const std::string& link, const std::string& link_file,
                                                       int devices);
// "8 devices: 6 x 10mbit,delay=20ms, 2 x 1mbit,delay=50ms" for the run's
// header line.
std::string DescribeFleetLinks(const std::vector<transport::LinkProfile>& links);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_LINK_FLAGS_H_
