#include "worker/data/source_mixture.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace flame::worker {
namespace {

// SplitMix64's finaliser: a bijective mix whose outputs for consecutive inputs look independent.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

absl::StatusOr<SourceMixture> SourceMixture::Create(const std::vector<double>& probs,
                                                    int64_t source_count, uint64_t seed) {
  if (source_count <= 0) return absl::InvalidArgumentError("training.dataset is empty");
  if (probs.empty()) {
    if (source_count > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("training.data_probs is required when training.dataset lists more than "
                       "one source (it lists ",
                       source_count, ")"));
    }
    return SourceMixture({1.0}, seed);
  }
  if (static_cast<int64_t>(probs.size()) != source_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.data_probs has ", probs.size(), " values for ", source_count,
                     " sources in training.dataset (one per source)"));
  }
  double total = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (!(probs[i] > 0) || !std::isfinite(probs[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training.data_probs[", i, "] must be a positive number (got ", probs[i], ")"));
    }
    total += probs[i];
  }
  std::vector<double> cumulative;
  double running = 0;
  for (double p : probs) {
    running += p / total;
    cumulative.push_back(running);
  }
  cumulative.back() = 1.0;  // rounding must not leave a gap at the top
  return SourceMixture(std::move(cumulative), seed);
}

int64_t SourceMixture::SourceOf(int64_t g) const {
  if (cumulative_.size() == 1) return 0;
  const uint64_t bits = Mix(Mix(seed_) ^ static_cast<uint64_t>(g));
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  for (size_t s = 0; s + 1 < cumulative_.size(); ++s) {
    if (u < cumulative_[s]) return static_cast<int64_t>(s);
  }
  return static_cast<int64_t>(cumulative_.size()) - 1;
}

std::vector<double> SourceMixture::probabilities() const {
  std::vector<double> probs;
  double previous = 0;
  for (double c : cumulative_) {
    probs.push_back(c - previous);
    previous = c;
  }
  return probs;
}

std::string SourceMixture::Describe() const {
  return absl::StrCat(absl::StrJoin(probabilities(), ","), "@", seed_);
}

}  // namespace flame::worker
