// Gossip graphs (ring, 2-D torus) and their Metropolis mixing weights.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "fedrt/runtime/collective_context.h"

namespace fedrt {
namespace peer {

void TorusShape(uint32_t n, uint32_t* rows, uint32_t* columns) {
  uint32_t r = 1;
  for (uint32_t k = 1; k * k <= n; ++k) {
    if (n % k == 0) r = k;
  }
  *rows = r;
  *columns = n == 0 ? 0 : n / r;
}

std::vector<std::vector<uint32_t>> GraphNeighbours(GossipGraph graph, uint32_t n) {
  std::vector<std::vector<uint32_t>> out(n);
  uint32_t rows = 1, columns = n;
  if (graph == GossipGraph::kTorus) TorusShape(n, &rows, &columns);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t r = i / columns, c = i % columns;
    const uint32_t candidates[4] = {r * columns + (c + columns - 1) % columns, r * columns + (c + 1) % columns,
                                    ((r + rows - 1) % rows) * columns + c, ((r + 1) % rows) * columns + c};
    for (uint32_t j : candidates) {
      if (j != i) out[i].push_back(j);
    }
    std::sort(out[i].begin(), out[i].end());
    out[i].erase(std::unique(out[i].begin(), out[i].end()), out[i].end());
  }
  return out;
}

std::vector<double> MetropolisWeights(const std::vector<std::vector<uint32_t>>& neighbours) {
  const std::size_t n = neighbours.size();
  std::vector<double> w(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    double off = 0;
    for (uint32_t j : neighbours[i]) {
      const double x = 1.0 / (1.0 + static_cast<double>(std::max(neighbours[i].size(), neighbours[j].size())));
      w[i * n + j] = x;
      off += x;
    }
    w[i * n + i] = 1.0 - off;
  }
  return w;
}

std::vector<double> SymmetricEigenvalues(const std::vector<double>& w, std::size_t n) {
  if (n == 0 || w.size() != n * n) return {};
  std::vector<double> a = w;
  // Cyclic Jacobi: rotate away each off-diagonal (p, q) in turn until the
  // off-diagonal mass is negligible (at most 100 sweeps; a few suffice).
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (std::size_t i = 0; i < n; ++i) {
      diag += a[i * n + i] * a[i * n + i];
      for (std::size_t j = 0; j < n; ++j) {
        if (i != j) off += a[i * n + j] * a[i * n + j];
      }
    }
    if (off <= 1e-30 * (diag + off)) break;
    for (std::size_t p = 0; p + 1 < n; ++p) {
      for (std::size_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (apq == 0.0) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (std::size_t k = 0; k < n; ++k) {  // columns p and q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (std::size_t k = 0; k < n; ++k) {  // rows p and q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
    }
  }
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = a[i * n + i];
  std::sort(values.begin(), values.end());
  return values;
}

double SecondLargestEigenvalueModulus(const std::vector<double>& w, std::size_t n) {
  if (n <= 1 || w.size() != n * n) return 0.0;
  std::vector<double> moduli = SymmetricEigenvalues(w, n);
  for (double& v : moduli) v = std::fabs(v);
  std::sort(moduli.begin(), moduli.end());
  // A doubly stochastic W has the eigenvalue 1 (the average); the next
  // largest modulus decides the mixing.
  return moduli[n - 2];
}

uint32_t MixingTime(double lambda, std::size_t n) {
  if (n <= 1) return 1;
  if (!(lambda < 1.0)) return UINT32_MAX;
  const double t = std::ceil(std::log(2.0 * static_cast<double>(n)) / (1.0 - lambda));
  return t < 1.0 ? 1u : t > 4e9 ? UINT32_MAX : static_cast<uint32_t>(t);
}

double MoniquaTheta(double c, double lr, double grad_bound, uint32_t mixing_time) {
  return c * lr * grad_bound * static_cast<double>(mixing_time);
}

}  // namespace peer
}  // namespace fedrt
