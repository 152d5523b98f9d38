// Gossip graphs (ring, 2-D torus) and their Metropolis mixing weights.
#include <algorithm>
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

}  // namespace peer
}  // namespace fedrt
