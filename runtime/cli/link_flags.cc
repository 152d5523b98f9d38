// --link and --link-file of `fedrt sim` (contract in link_flags.h).
#include "cli/link_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

namespace fedrt::cli {
namespace {

using transport::LinkProfile;

bool ParseIndex(const std::string& text, long* value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 6) return false;
  *value = std::strtol(text.c_str(), nullptr, 10);
  return true;
}

}  // namespace

Result<std::vector<LinkProfile>> ParseLinkFile(const std::string& text, int devices) {
  std::vector<LinkProfile> links(static_cast<std::size_t>(devices));
  std::vector<bool> named(static_cast<std::size_t>(devices), false);
  std::vector<std::pair<double, LinkProfile>> shares;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = "line " + std::to_string(number) + ": ";
    const std::size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string who, profile_text, extra;
    if (!(words >> who)) continue;
    if (!(words >> profile_text) || (words >> extra)) {
      return InvalidArgument(where + "expected '<who> <profile>' (who: 3, 0-3 or 70%)");
    }
    Result<LinkProfile> profile = transport::ParseLinkProfile(profile_text);
    if (!profile.ok()) return InvalidArgument(where + profile.status().message());
    if (who.back() == '%') {
      char* end = nullptr;
      const double share = std::strtod(who.c_str(), &end);
      if (end != who.c_str() + who.size() - 1 || !(share > 0) || share > 100) {
        return InvalidArgument(where + "share '" + who + "': expected a percentage above 0 and at most 100");
      }
      shares.emplace_back(share, *profile);
      continue;
    }
    const std::size_t dash = who.find('-');
    long first = 0, last = 0;
    if (!ParseIndex(who.substr(0, dash), &first) ||
        !ParseIndex(dash == std::string::npos ? who : who.substr(dash + 1), &last) || last < first) {
      return InvalidArgument(where + "'" + who + "' is not a device index, a range such as 0-3, or a share such as 70%");
    }
    if (last >= devices) {
      return InvalidArgument(where + "device " + std::to_string(last) + " does not exist (" +
                             std::to_string(devices) + " devices: 0 to " + std::to_string(devices - 1) + ")");
    }
    for (long i = first; i <= last; ++i) {
      if (named[static_cast<std::size_t>(i)]) {
        return InvalidArgument(where + "device " + std::to_string(i) + " already has a profile");
      }
      named[static_cast<std::size_t>(i)] = true;
      links[static_cast<std::size_t>(i)] = *profile;
    }
  }
  std::vector<std::size_t> rest;
  for (std::size_t i = 0; i < named.size(); ++i) {
    if (!named[i]) rest.push_back(i);
  }
  if (shares.empty()) {
    if (!rest.empty()) {
      return InvalidArgument("device " + std::to_string(rest[0]) + " has no profile (name it, or give shares such as 70%)");
    }
    return links;
  }
  double total = 0;
  for (const auto& share : shares) total += share.first;
  if (std::fabs(total - 100) > 0.01) {
    return InvalidArgument("the shares add up to " + std::to_string(total) + "%, not 100%");
  }
  // Largest remainder: floor of each share, then one more device to the
  // largest fractions (the earlier line on a tie) until all are placed.
  std::vector<std::size_t> counts(shares.size());
  std::vector<std::pair<double, std::size_t>> fractions;
  std::size_t placed = 0;
  for (std::size_t k = 0; k < shares.size(); ++k) {
    const double exact = shares[k].first / 100 * static_cast<double>(rest.size());
    counts[k] = static_cast<std::size_t>(std::floor(exact + 1e-9));
    placed += counts[k];
    fractions.emplace_back(-(exact - static_cast<double>(counts[k])), k);
  }
  std::stable_sort(fractions.begin(), fractions.end());
  for (std::size_t k = 0; placed < rest.size(); ++k, ++placed) counts[fractions[k % fractions.size()].second]++;
  std::size_t next = 0;
  for (std::size_t k = 0; k < shares.size(); ++k) {
    for (std::size_t c = 0; c < counts[k]; ++c) links[rest[next++]] = shares[k].second;
  }
  return links;
}

Result<std::vector<LinkProfile>> FleetLinks(const std::string& link, const std::string& link_file, int devices) {
  if (!link.empty() && !link_file.empty()) return InvalidArgument("give --link or --link-file, not both");
  if (!link.empty()) {
    Result<LinkProfile> profile = transport::ParseLinkProfile(link);
    if (!profile.ok()) return InvalidArgument("--link: " + profile.status().message());
    return std::vector<LinkProfile>(static_cast<std::size_t>(devices), *profile);
  }
  if (link_file.empty()) return std::vector<LinkProfile>();
  std::ifstream in(link_file);
  if (!in) return Status(StatusCode::kNotFound, "--link-file " + link_file + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  Result<std::vector<LinkProfile>> links = ParseLinkFile(text.str(), devices);
  if (!links.ok()) return InvalidArgument("--link-file " + link_file + ": " + links.status().message());
  return links;
}

std::string DescribeFleetLinks(const std::vector<LinkProfile>& links) {
  std::vector<std::pair<std::string, int>> groups;  // in order of first appearance
  for (const LinkProfile& link : links) {
    const std::string text = transport::FormatLinkProfile(link);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == text; });
    if (it == groups.end()) {
      groups.emplace_back(text, 1);
    } else {
      it->second++;
    }
  }
  std::string out;
  for (const auto& group : groups) {
    out += (out.empty() ? "" : ", ") + std::to_string(group.second) + " x " + group.first;
  }
  return out;
}

}  // namespace fedrt::cli
