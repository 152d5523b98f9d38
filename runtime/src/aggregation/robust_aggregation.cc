// Robust aggregation rules (contract in fedrt/runtime/robust_aggregation.h).
#include "fedrt/runtime/robust_aggregation.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <utility>

#include "fedrt/codecs/codec.h"
#include "fedrt/runtime/aggregation.h"

namespace fedrt {
namespace {

constexpr const char* kForms = "mean, median, trimmed-mean:F (0 <= F < 0.5), krum:F or multi-krum:F (F devices)";

Status BadRule(const std::string& text) {
  return InvalidArgument("unknown aggregation '" + text + "' (" + kForms + ")");
}

// The whole of `text` as a number, or false.
bool ParseNumber(const std::string& text, double* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size() && std::isfinite(*value);
}

// Sorted by value, then weight: the order (and so the result) depends only
// on the multiset of pairs.
using Entry = std::pair<float, double>;

float WeightedMedian(std::vector<Entry>& column) {
  std::sort(column.begin(), column.end());
  double total = 0;
  for (const Entry& e : column) total += e.second;
  const double half = total / 2;
  double cumulative = 0;
  for (std::size_t k = 0; k < column.size(); ++k) {
    cumulative += column[k].second;
    if (cumulative > half) return column[k].first;
    if (cumulative == half && k + 1 < column.size()) {
      // Exactly half below: the midpoint of the two middle values, computed
      // so it cannot overflow (both are finite floats).
      const double mid = 0.5 * static_cast<double>(column[k].first) + 0.5 * static_cast<double>(column[k + 1].first);
      return static_cast<float>(mid);
    }
  }
  return column.back().first;
}

float TrimmedMean(std::vector<Entry>& column, std::size_t trim) {
  std::sort(column.begin(), column.end());
  double sum = 0, weight = 0;
  for (std::size_t k = trim; k + trim < column.size(); ++k) {
    sum += column[k].second * static_cast<double>(column[k].first);
    weight += column[k].second;
  }
  return static_cast<float>(sum / weight);
}

double SquaredDistance(const float* a, const float* b, std::size_t d) {
  double sum = 0;
  for (std::size_t i = 0; i < d; ++i) {
    const double diff = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sum += diff * diff;
  }
  return sum;
}

}  // namespace

Result<AggregationRule> ParseAggregationRule(const std::string& text) {
  AggregationRule rule;
  if (text == "mean") return rule;
  if (text == "median") {
    rule.kind = AggregationKind::kMedian;
    return rule;
  }
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos) return BadRule(text);
  const std::string name = text.substr(0, colon);
  const std::string argument = text.substr(colon + 1);
  double value = 0;
  if (!ParseNumber(argument, &value)) {
    return InvalidArgument("aggregation '" + text + "': '" + argument + "' is not a number");
  }
  if (name == "trimmed-mean") {
    if (!(value >= 0 && value < 0.5)) {
      return InvalidArgument("aggregation '" + text + "': the trimmed fraction must be at least 0 and below 0.5");
    }
    rule.kind = AggregationKind::kTrimmedMean;
    rule.trim_fraction = value;
    return rule;
  }
  if (name == "krum" || name == "multi-krum") {
    if (!(value >= 0 && value <= 1e6) || value != std::floor(value)) {
      return InvalidArgument("aggregation '" + text + "': F is a whole number of devices (0 to 10^6)");
    }
    rule.kind = name == "krum" ? AggregationKind::kKrum : AggregationKind::kMultiKrum;
    rule.byzantine = static_cast<std::size_t>(value);
    return rule;
  }
  return BadRule(text);
}

std::string AggregationRuleName(const AggregationRule& rule) {
  switch (rule.kind) {
    case AggregationKind::kMean: return "mean";
    case AggregationKind::kMedian: return "median";
    case AggregationKind::kTrimmedMean: {
      char text[64];
      std::snprintf(text, sizeof(text), "trimmed-mean:%g", rule.trim_fraction);
      return text;
    }
    case AggregationKind::kKrum: return "krum:" + std::to_string(rule.byzantine);
    case AggregationKind::kMultiKrum: return "multi-krum:" + std::to_string(rule.byzantine);
  }
  return "?";
}

bool HoldsUpdates(const AggregationRule& rule) { return rule.kind != AggregationKind::kMean; }

std::size_t MinimumUpdates(const AggregationRule& rule) {
  if (rule.kind == AggregationKind::kKrum || rule.kind == AggregationKind::kMultiKrum) return 2 * rule.byzantine + 3;
  return 1;
}

void AggregationScratch::Reserve(std::size_t n) {
  column.reserve(n);
  distance.reserve(n * n);
  scores.reserve(n);
  row.reserve(n);
  order.reserve(n);
  selected.reserve(n);
}

Status Aggregate(const AggregationRule& rule, const std::vector<const float*>& updates,
                 const std::vector<double>& weights, std::size_t d, float* out, AggregationDetail* detail) {
  AggregationScratch scratch;
  return Aggregate(rule, updates, weights, d, out, detail, &scratch);
}

Status Aggregate(const AggregationRule& rule, const std::vector<const float*>& updates,
                 const std::vector<double>& weights, std::size_t d, float* out, AggregationDetail* detail,
                 AggregationScratch* scratch) {
  const std::size_t n = updates.size();
  if (weights.size() != n) return InvalidArgument("one weight per update");
  if (n < MinimumUpdates(rule)) {
    return InvalidArgument(AggregationRuleName(rule) + " needs at least " + std::to_string(MinimumUpdates(rule)) +
                           " updates" + (MinimumUpdates(rule) > 1 ? " (2F + 3)" : "") + ", got " +
                           std::to_string(n));
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (!(weights[k] > 0) || !std::isfinite(weights[k])) return InvalidArgument("update weight must be positive");
    FEDRT_RETURN_IF_ERROR(CheckFinite(updates[k], d));
  }
  if (detail != nullptr) {
    detail->selected.clear();
    detail->scores.clear();
  }
  switch (rule.kind) {
    case AggregationKind::kMean: {
      double total = 0;
      for (double w : weights) total += w;
      for (std::size_t i = 0; i < d; ++i) {
        double sum = 0;
        for (std::size_t k = 0; k < n; ++k) sum += weights[k] * static_cast<double>(updates[k][i]);
        out[i] = static_cast<float>(sum / total);
      }
      return Status::Ok();
    }
    case AggregationKind::kMedian:
    case AggregationKind::kTrimmedMean: {
      const std::size_t trim = rule.kind == AggregationKind::kTrimmedMean
                                   ? static_cast<std::size_t>(std::floor(rule.trim_fraction * static_cast<double>(n)))
                                   : 0;
      std::vector<Entry>& column = scratch->column;
      column.resize(n);
      for (std::size_t i = 0; i < d; ++i) {
        for (std::size_t k = 0; k < n; ++k) column[k] = {updates[k][i], weights[k]};
        out[i] = rule.kind == AggregationKind::kMedian ? WeightedMedian(column) : TrimmedMean(column, trim);
      }
      return Status::Ok();
    }
    case AggregationKind::kKrum:
    case AggregationKind::kMultiKrum: {
      std::vector<double>& distance = scratch->distance;
      distance.assign(n * n, 0.0);
      for (std::size_t a = 0; a < n; ++a) {
        for (std::size_t b = a + 1; b < n; ++b) {
          distance[a * n + b] = distance[b * n + a] = SquaredDistance(updates[a], updates[b], d);
        }
      }
      const std::size_t neighbours = n - rule.byzantine - 2;
      std::vector<double>& scores = scratch->scores;
      scores.assign(n, 0.0);
      std::vector<double>& row = scratch->row;
      for (std::size_t a = 0; a < n; ++a) {
        row.clear();
        for (std::size_t b = 0; b < n; ++b) {
          if (b != a) row.push_back(distance[a * n + b]);
        }
        std::partial_sort(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(neighbours), row.end());
        scores[a] = std::accumulate(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(neighbours), 0.0);
      }
      // Lowest scores first; equal scores in the caller's order.
      std::vector<std::size_t>& order = scratch->order;
      order.resize(n);
      std::iota(order.begin(), order.end(), std::size_t{0});
      // (std::sort with the index as tie-break: stable_sort's buffer would be an allocation.)
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return scores[a] < scores[b] || (scores[a] == scores[b] && a < b);
      });
      const std::size_t m = rule.kind == AggregationKind::kKrum ? 1 : n - rule.byzantine;
      std::vector<std::size_t>& selected = scratch->selected;
      selected.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m));
      std::sort(selected.begin(), selected.end());
      double total = 0;
      for (std::size_t k : selected) total += weights[k];
      for (std::size_t i = 0; i < d; ++i) {
        double sum = 0;
        for (std::size_t k : selected) sum += weights[k] * static_cast<double>(updates[k][i]);
        out[i] = m == 1 ? updates[selected[0]][i] : static_cast<float>(sum / total);
      }
      if (detail != nullptr) {
        detail->selected = selected;  // copied: both keep their memory
        detail->scores = scores;
      }
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown aggregation rule");
}

double ClipToNorm(float* update, std::size_t d, double max_norm) {
  const double norm = UpdateNorm(update, d);
  if (!(norm > max_norm) || !(max_norm > 0)) return 1.0;
  const double scale = max_norm / norm;
  for (std::size_t i = 0; i < d; ++i) update[i] = static_cast<float>(static_cast<double>(update[i]) * scale);
  return scale;
}

}  // namespace fedrt
