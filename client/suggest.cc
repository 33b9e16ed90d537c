#include "client/suggest.h"

#include <algorithm>

namespace flame::client {

size_t EditDistance(absl::string_view a, absl::string_view b) {
  // d[i][j]: distance between the first i characters of a and the first j of b. Three rows are
  // enough because a swap looks back two rows.
  const size_t n = b.size();
  std::vector<size_t> before(n + 1), previous(n + 1), current(n + 1);
  for (size_t j = 0; j <= n; ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= n; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[n];
}

std::optional<std::string> ClosestMatch(absl::string_view name,
                                        const std::vector<std::string>& candidates) {
  const size_t limit = std::clamp<size_t>(name.size() / 3, 1, 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

}  // namespace flame::client
