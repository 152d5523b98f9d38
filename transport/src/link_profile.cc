// Link profiles and the model of one direction of a link (link_profile.h).
#include "fedrt/transport/link_profile.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace fedrt {
namespace transport {
namespace {

// "12.5" of "12.5mbit": the number in front and what follows it.
bool SplitNumber(const std::string& text, double* value, std::string* unit) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) return false;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(*value)) return false;
  *unit = std::string(end);
  return true;
}

Result<uint32_t> ParseDelay(const std::string& text) {
  double value = 0;
  std::string unit;
  const Status bad = InvalidArgument("link delay '" + text + "': expected milliseconds such as 50ms, 2s or 50");
  if (!SplitNumber(text, &value, &unit)) return bad;
  if (unit == "s") {
    value *= 1000;
  } else if (!unit.empty() && unit != "ms") {
    return bad;
  }
  if (value < 0 || value > 60000) return InvalidArgument("link delay '" + text + "': at most 60 s");
  return static_cast<uint32_t>(std::llround(value));
}

Result<double> ParseLoss(const std::string& text) {
  double value = 0;
  std::string unit;
  if (!SplitNumber(text, &value, &unit) || (!unit.empty() && unit != "%")) {
    return InvalidArgument("link loss '" + text + "': expected a percentage such as 1% or 0.5");
  }
  if (value < 0 || value > 50) return InvalidArgument("link loss '" + text + "': from 0 to 50%");
  return value / 100;
}

// A profile's rates may be `unlimited` (0): the form FormatLinkProfile
// gives a direction it does not limit, such as the delay-only profile the
// user-space shaper gets beside a kernel that shapes the rate.
Result<uint64_t> ParseRateOrUnlimited(const std::string& text) {
  if (text == "unlimited") return uint64_t{0};
  return ParseLinkRate(text);
}

std::string FormatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

}  // namespace

Result<uint64_t> ParseLinkRate(const std::string& text) {
  double value = 0;
  std::string unit;
  const Status bad = InvalidArgument("link rate '" + text + "': expected a rate such as 512kbit, 1mbit or 1.5gbit");
  if (!SplitNumber(text, &value, &unit)) return bad;
  double scale = 0;
  if (unit == "bit") scale = 1;
  if (unit == "kbit") scale = 1e3;
  if (unit == "mbit") scale = 1e6;
  if (unit == "gbit") scale = 1e9;
  if (scale == 0) return bad;
  const double bits = value * scale;
  // 8 kbit/s: below it one 4 MiB frame takes over an hour.
  if (bits < 8000 || bits > 1e12) return InvalidArgument("link rate '" + text + "': from 8kbit to 1000gbit");
  return static_cast<uint64_t>(std::llround(bits));
}

std::string FormatLinkRate(uint64_t bits_per_second) {
  const double bits = static_cast<double>(bits_per_second);
  if (bits_per_second % 1000000000 == 0) return FormatNumber(bits / 1e9) + "gbit";
  if (bits >= 1e6) return FormatNumber(bits / 1e6) + "mbit";
  if (bits >= 1e3) return FormatNumber(bits / 1e3) + "kbit";
  return FormatNumber(bits) + "bit";
}

Result<LinkProfile> ParseLinkProfile(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    parts.push_back(text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  LinkProfile profile;
  Result<uint64_t> up = ParseRateOrUnlimited(parts[0]);
  if (!up.ok()) {
    return InvalidArgument("link profile '" + text + "': " + up.status().message() +
                           " (form: RATE[,delay=MS][,loss=PCT][,down=RATE])");
  }
  profile.up_bits_per_second = *up;
  profile.down_bits_per_second = *up;
  bool seen_delay = false, seen_loss = false, seen_down = false;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::size_t eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    const std::string value = eq == std::string::npos ? std::string() : parts[i].substr(eq + 1);
    Status bad;
    if (key == "delay" && !seen_delay) {
      seen_delay = true;
      Result<uint32_t> delay = ParseDelay(value);
      if (delay.ok()) profile.delay_ms = *delay;
      bad = delay.status();
    } else if (key == "loss" && !seen_loss) {
      seen_loss = true;
      Result<double> loss = ParseLoss(value);
      if (loss.ok()) profile.loss = *loss;
      bad = loss.status();
    } else if (key == "down" && !seen_down) {
      seen_down = true;
      Result<uint64_t> down = ParseRateOrUnlimited(value);
      if (down.ok()) profile.down_bits_per_second = *down;
      bad = down.status();
    } else {
      bad = InvalidArgument("'" + parts[i] + "' is not delay=MS, loss=PCT or down=RATE, or is repeated");
    }
    if (!bad.ok()) return InvalidArgument("link profile '" + text + "': " + bad.message());
  }
  if (!profile.shaped()) return InvalidArgument("link profile '" + text + "' shapes nothing");
  return profile;
}

std::string FormatLinkProfile(const LinkProfile& profile) {
  std::string text = profile.up_bits_per_second ? FormatLinkRate(profile.up_bits_per_second) : "unlimited";
  if (profile.delay_ms) text += ",delay=" + std::to_string(profile.delay_ms) + "ms";
  if (profile.loss > 0) text += ",loss=" + FormatNumber(profile.loss * 100) + "%";
  if (profile.down_bits_per_second != profile.up_bits_per_second) {
    text += ",down=" + (profile.down_bits_per_second ? FormatLinkRate(profile.down_bits_per_second) : "unlimited");
  }
  return text;
}

LinkDirection::LinkDirection(uint64_t bits_per_second, uint32_t delay_ms, double loss, uint64_t seed)
    : bits_per_second_(bits_per_second), delay_us_(uint64_t{delay_ms} * 1000), loss_(loss), rng_(seed) {}

uint64_t LinkDirection::Draw() {
  uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t LinkDirection::Transmit(uint64_t now_us, std::size_t bytes) {
  uint64_t lost = 0;
  if (loss_ > 0) {
    const double threshold = loss_ * 18446744073709551616.0;  // 2^64
    const std::size_t packets = std::max<std::size_t>(1, (bytes + kLinkPacketBytes - 1) / kLinkPacketBytes);
    for (std::size_t i = 0; i < packets; ++i) lost += static_cast<double>(Draw()) < threshold ? 1 : 0;
    lost_packets_ += lost;
  }
  const uint64_t start = std::max(now_us, busy_until_us_);
  uint64_t done = start;
  if (bits_per_second_ != 0) {
    const double bytes_per_us = static_cast<double>(bits_per_second_) / 8e6;
    tokens_ = std::min<double>(kLinkBurstBytes, tokens_ + static_cast<double>(start - filled_us_) * bytes_per_us);
    filled_us_ = start;
    const double total = static_cast<double>(bytes + lost * kLinkPacketBytes);
    if (tokens_ >= total) {
      tokens_ -= total;
    } else {
      done = start + static_cast<uint64_t>(std::ceil((total - tokens_) / bytes_per_us));
      tokens_ = 0;
      filled_us_ = done;
    }
  }
  // Recovering each loss takes a round trip, during which the link waits.
  done += lost * std::max<uint64_t>(1000, 2 * delay_us_);
  busy_until_us_ = done;
  return done + delay_us_;
}

uint64_t LinkDirection::Forward(uint64_t now_us, std::size_t bytes) {
  uint64_t lead = 0;
  if (bits_per_second_ != 0) {
    lead = static_cast<uint64_t>(static_cast<double>(bytes) * 8e6 / static_cast<double>(bits_per_second_));
  }
  const uint64_t arrival = Transmit(now_us - std::min(now_us, lead), bytes);
  return std::max(arrival, now_us + delay_us_);
}

}  // namespace transport
}  // namespace fedrt
