// `fedrt sim --link` and `--link-file` (runtime/cli/link_flags.h): one
// profile per device, from one profile, per device or per share of the fleet.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli/link_flags.h"

namespace fedrt::cli {
namespace {

using transport::LinkProfile;

std::vector<uint64_t> Rates(const std::vector<LinkProfile>& links) {
  std::vector<uint64_t> rates;
  for (const LinkProfile& link : links) rates.push_back(link.up_bits_per_second);
  return rates;
}

TEST_CASE("a link file's shares divide the fleet by largest remainder in index order") {
  Result<std::vector<LinkProfile>> links = ParseLinkFile("# fleet\n70% 10mbit,delay=20ms\n30% 1mbit  # slow\n\n", 8);
  REQUIRE(links.ok());
  CHECK(Rates(*links) == std::vector<uint64_t>{10000000, 10000000, 10000000, 10000000, 10000000, 10000000,
                                               1000000, 1000000});
  CHECK((*links)[0].delay_ms == 20);
  CHECK(DescribeFleetLinks(*links) == "6 x 10mbit,delay=20ms, 2 x 1mbit");
  Result<std::vector<LinkProfile>> thirds = ParseLinkFile("33.4% 1mbit\n33.3% 2mbit\n33.3% 3mbit\n", 4);
  REQUIRE(thirds.ok());
  CHECK(Rates(*thirds) == std::vector<uint64_t>{1000000, 1000000, 2000000, 3000000});
}

TEST_CASE("a link file names devices by index and range, and shares cover the others") {
  Result<std::vector<LinkProfile>> links = ParseLinkFile("1 256kbit\n50% 10mbit\n50% 1mbit\n4-5 2mbit\n", 6);
  REQUIRE(links.ok());
  CHECK(Rates(*links) == std::vector<uint64_t>{10000000, 256000, 10000000, 1000000, 2000000, 2000000});
  Result<std::vector<LinkProfile>> each = ParseLinkFile("0-1 1mbit\n2 2mbit\n", 3);
  REQUIRE(each.ok());
  CHECK(Rates(*each) == std::vector<uint64_t>{1000000, 1000000, 2000000});
}

TEST_CASE("a wrong link file is refused with the line and the reason") {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"70% 10mbit\n20% 1mbit\n", "add up to 90"},
      {"0 1mbit\n", "device 1 has no profile"},
      {"0 1mbit\n0-1 2mbit\n", "line 2: device 0 already has a profile"},
      {"5 1mbit\n100% 1mbit\n", "line 1: device 5 does not exist"},
      {"100% 1mbit extra\n", "line 1: expected '<who> <profile>'"},
      {"all 1mbit\n", "line 1: 'all' is not a device index"},
      {"120% 1mbit\n", "line 1: share '120%'"},
      {"100% fast\n", "line 1: link profile 'fast'"},
      {"3-1 1mbit\n100% 1mbit\n", "line 1: '3-1'"},
  };
  for (const auto& c : cases) {
    Result<std::vector<LinkProfile>> links = ParseLinkFile(c.text, 2);
    REQUIRE_MESSAGE(!links.ok(), c.text);
    CHECK_MESSAGE(links.status().message().find(c.message) != std::string::npos, links.status().message());
  }
}

TEST_CASE("fleet links come from one profile, a file, or nothing, never both") {
  Result<std::vector<LinkProfile>> same = FleetLinks("1mbit,delay=50ms", "", 3);
  REQUIRE(same.ok());
  CHECK(same->size() == 3);
  CHECK((*same)[2].delay_ms == 50);
  CHECK(FleetLinks("", "", 3)->empty());
  CHECK(FleetLinks("1mbit", "f.txt", 3).status().code() == StatusCode::kInvalidArgument);
  CHECK(FleetLinks("", "/nonexistent/links.txt", 3).status().code() == StatusCode::kNotFound);
  CHECK(FleetLinks("1mbps", "", 3).status().message().find("--link") != std::string::npos);
}

}  // namespace
}  // namespace fedrt::cli
