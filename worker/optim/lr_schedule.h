// flame's learning-rate schedule (torchtitan's linear_warmup_stable_decay, as flame pins it):
// linear warm-up, a stable phase, then a linear / sqrt / cosine decay to lr_min (a ratio of the
// peak). Pure arithmetic, no Torch, so it is unit-tested against hand-computed values.
//
//   warmup  W = min(warmup_steps, steps)
//   decay   D = round(steps * decay_ratio), at most steps - W; steps - W when decay_ratio is unset
//   stable  S = steps + 1 - W - D     (one virtual extra step keeps the last LR above lr_min)
//   factor(s), s = 0-based index of the optimizer step:
//     s < W          (s + 1) / W
//     s < W + S      1
//     otherwise      p = (s + 1 - W - S) / D; lr_min + (1 - lr_min) * decay(p)
//                    decay = 1 - p | 1 - sqrt(p) | (1 + cos(pi p)) / 2
#pragma once

#include <cstdint>

#include "worker/config/train_config.h"

namespace flame::worker {

class LrSchedule {
 public:
  LrSchedule(const LrScheduleConfig& config, int64_t training_steps, double peak_lr);

  // Multiplier of the peak LR for the 0-based optimizer step `step`.
  double Factor(int64_t step) const;
  // The LR that optimizer step `step` (0-based) uses.
  double LearningRate(int64_t step) const { return peak_lr_ * Factor(step); }

  int64_t warmup_steps() const { return warmup_; }
  int64_t stable_steps() const { return stable_; }
  int64_t decay_steps() const { return decay_; }

 private:
  enum class Decay { kLinear, kSqrt, kCosine };
  Decay decay_type_;
  double lr_min_;
  double peak_lr_;
  int64_t warmup_;
  int64_t stable_;
  int64_t decay_;
};

}  // namespace flame::worker
