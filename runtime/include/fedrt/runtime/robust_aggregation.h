// Robust aggregation rules: how the star aggregator combines a round's
// decoded updates when some devices may be broken or hostile.
//
//   mean             sample-weighted mean (FedAvg); kept as a running sum
//   median           coordinate-wise weighted median (Yin et al. 2018)
//   trimmed-mean:F   per coordinate, drop the floor(F * n) smallest and
//                    largest values, sample-weighted mean of the rest,
//                    0 <= F < 0.5 (Yin et al. 2018)
//   krum:F           the one update whose summed squared distance to its
//                    n - F - 2 nearest others is smallest (Blanchard et al.
//                    2017); needs n >= 2F + 3
//   multi-krum:F     the sample-weighted mean of the m = n - F updates with
//                    the lowest Krum scores (the same paper); n >= 2F + 3
//
// Weights. The median is the weighted median (the value where the
// cumulative sample weight, in value order, reaches half the total; exactly
// half between two values gives their midpoint, so equal weights give the
// textbook median). Trimmed mean trims by count (F is a fraction of the
// devices, as an attacker controls devices, not samples) and weights the
// rest by samples. Krum scores ignore the weights (a distance is not
// weighted in the paper, and a self-reported count must not buy a
// selection); multi-krum weights the mean of the selected updates.
//
// Determinism: every rule depends only on the list of (update, weight) in
// the caller's order; ties (equal values, equal Krum scores) resolve to the
// earlier update, so the result is the same bits for the same inputs. The
// star aggregator passes its updates in the order of the sampled device ids.
//
// Finite in, finite out: inputs must be finite (kInvalidArgument otherwise);
// the median and Krum return one of the inputs' values, trimmed and
// multi-krum means are convex combinations computed in double, and Krum
// distances are summed in double (a squared difference of two floats is at
// most 4.7e77), so no rule makes a NaN or an Inf from finite updates.
//
// Memory: mean needs only the running sum; every other rule needs all the
// round's decoded updates at once (n * d floats), plus, for median and
// trimmed mean, n (value, weight) pairs of scratch, and for Krum an n x n
// distance table.
//
// Thread-safety: pure functions.
#ifndef FEDRT_RUNTIME_ROBUST_AGGREGATION_H_
#define FEDRT_RUNTIME_ROBUST_AGGREGATION_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

enum class AggregationKind { kMean, kMedian, kTrimmedMean, kKrum, kMultiKrum };

struct AggregationRule {
  AggregationKind kind = AggregationKind::kMean;
  double trim_fraction = 0;   // trimmed-mean: F
  std::size_t byzantine = 0;  // krum, multi-krum: F, the devices it tolerates
};

// "mean", "median", "trimmed-mean:F" (0 <= F < 0.5), "krum:F",
// "multi-krum:F" (F a whole number). kInvalidArgument naming the forms.
Result<AggregationRule> ParseAggregationRule(const std::string& text);
// The canonical text ("trimmed-mean:0.25", "krum:2").
std::string AggregationRuleName(const AggregationRule& rule);
// Whether the rule needs every update of a round at once (all but mean).
bool HoldsUpdates(const AggregationRule& rule);
// The fewest updates the rule can combine: 2F + 3 for krum and multi-krum,
// 1 for the others.
std::size_t MinimumUpdates(const AggregationRule& rule);

// What a rule chose (Krum, multi-krum: the indices of the selected updates,
// in increasing order; every other rule: empty).
struct AggregationDetail {
  std::vector<std::size_t> selected;
  std::vector<double> scores;  // Krum scores, one per update
};

// Combines n = updates.size() vectors of d floats with their weights
// (positive and finite) into out[0..d). kInvalidArgument for fewer than
// MinimumUpdates(rule), a weight that is not positive, or a value that is
// not finite; out is untouched then.
Status Aggregate(const AggregationRule& rule, const std::vector<const float*>& updates,
                 const std::vector<double>& weights, std::size_t d, float* out,
                 AggregationDetail* detail = nullptr);

// Aggregate's working vectors (a column of n values; Krum's n x n distances,
// scores and order). A caller that keeps one, with room for its largest n
// (Reserve), aggregates without allocating; *detail keeps its vectors too.
struct AggregationScratch {
  std::vector<std::pair<float, double>> column;
  std::vector<double> distance, scores, row;
  std::vector<std::size_t> order, selected;
  void Reserve(std::size_t n);
};
Status Aggregate(const AggregationRule& rule, const std::vector<const float*>& updates,
                 const std::vector<double>& weights, std::size_t d, float* out, AggregationDetail* detail,
                 AggregationScratch* scratch);

// Scales update[0..d) so that its L2 norm is at most max_norm (> 0);
// returns the factor applied (1: it was within the bound).
double ClipToNorm(float* update, std::size_t d, double max_norm);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_ROBUST_AGGREGATION_H_
