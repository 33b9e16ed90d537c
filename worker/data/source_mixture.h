// Which source each document of the global stream comes from, when training.dataset names several.
//
// Document g of the stream (g = 0, 1, 2, ... over the whole run, all ranks together) comes from
// the source whose slice of [0, 1) holds u(g), a uniform number made by hashing (seed, g). The
// draw is a pure function of g: it has no state beyond the counter, so a data position needs no
// RNG state, every rank computes the same sources, and a resumed run draws exactly the same
// mixture. Over many documents source s is drawn with frequency probs[s] (normalised).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flame::worker {

class SourceMixture {
 public:
  // `probs`: empty means one source (probability 1); otherwise one positive weight per source,
  // normalised here. Errors name training.data_probs.
  static absl::StatusOr<SourceMixture> Create(const std::vector<double>& probs,
                                              int64_t source_count, uint64_t seed);

  // The source of global document g.
  int64_t SourceOf(int64_t g) const;
  int64_t source_count() const { return static_cast<int64_t>(cumulative_.size()); }
  // Normalised probabilities.
  std::vector<double> probabilities() const;
  // The probabilities and seed as text ("0.7,0.3@42"), to notice a changed mixture on resume.
  std::string Describe() const;

 private:
  SourceMixture(std::vector<double> cumulative, uint64_t seed)
      : cumulative_(std::move(cumulative)), seed_(seed) {}
  std::vector<double> cumulative_;  // upper end of each source's slice; the last is 1
  uint64_t seed_;
};

}  // namespace flame::worker
