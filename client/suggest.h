// "Did you mean ...?" for misspelt names: the closest candidate by edit distance.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace flame::client {

// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two
// neighbouring characters each cost 1, so the common typo "stpes" is one edit from "steps".
size_t EditDistance(absl::string_view a, absl::string_view b);

// The candidate closest to `name`, if it is close enough to be what the user meant: at most a
// third of the name's length in edits (at least 1, at most 3). Ties go to the earlier candidate.
std::optional<std::string> ClosestMatch(absl::string_view name,
                                        const std::vector<std::string>& candidates);

}  // namespace flame::client
