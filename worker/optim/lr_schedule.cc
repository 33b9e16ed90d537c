#include "worker/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace flame::worker {

LrSchedule::LrSchedule(const LrScheduleConfig& config, int64_t training_steps, double peak_lr)
    : lr_min_(config.lr_min), peak_lr_(peak_lr) {
  decay_type_ = config.decay_type == "sqrt"     ? Decay::kSqrt
                : config.decay_type == "cosine" ? Decay::kCosine
                                                : Decay::kLinear;
  warmup_ = std::min(config.warmup_steps, training_steps);
  if (config.decay_ratio) {
    // Python's round(): halves go to the even neighbour (nearbyint in the default mode).
    decay_ = static_cast<int64_t>(
        std::nearbyint(static_cast<double>(training_steps) * *config.decay_ratio));
    decay_ = std::min(decay_, training_steps - warmup_);
  } else {
    decay_ = training_steps - warmup_;
  }
  stable_ = training_steps + 1 - warmup_ - decay_;
}

double LrSchedule::Factor(int64_t step) const {
  if (step < warmup_) return static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (step < warmup_ + stable_) return 1.0;
  if (decay_ <= 0) return 1.0;
  // Past the last step (which no caller trains) the factor stays at lr_min.
  const double progress = std::min(
      1.0, static_cast<double>(step + 1 - warmup_ - stable_) / static_cast<double>(decay_));
  double decay = 1.0 - progress;
  if (decay_type_ == Decay::kSqrt) decay = 1.0 - std::sqrt(progress);
  if (decay_type_ == Decay::kCosine) decay = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return lr_min_ + (1.0 - lr_min_) * decay;
}

}  // namespace flame::worker
