// flame's warmup-stable-decay schedule against values worked out by hand.
#include "worker/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace flame::worker {
namespace {

LrScheduleConfig Config(int64_t warmup, std::string decay_type, double lr_min,
                        std::optional<double> decay_ratio = std::nullopt) {
  LrScheduleConfig config;
  config.warmup_steps = warmup;
  config.decay_type = std::move(decay_type);
  config.lr_min = lr_min;
  config.decay_ratio = decay_ratio;
  return config;
}

TEST(LrSchedule, WarmsUpLinearlyThenDecaysWithOneVirtualExtraStep) {
  // steps 10, warmup 3: decay 7 steps, stable 10 + 1 - 3 - 7 = 1.
  const LrSchedule schedule(Config(3, "linear", 0.0), 10, 1e-3);
  EXPECT_EQ(schedule.warmup_steps(), 3);
  EXPECT_EQ(schedule.decay_steps(), 7);
  EXPECT_EQ(schedule.stable_steps(), 1);
  const double expected[] = {1.0 / 3, 2.0 / 3, 1.0,     1.0,     6.0 / 7,
                             5.0 / 7, 4.0 / 7, 3.0 / 7, 2.0 / 7, 1.0 / 7};
  for (int64_t step = 0; step < 10; ++step) {
    EXPECT_NEAR(schedule.Factor(step), expected[step], 1e-12) << "step " << step;
  }
  // The last trained step keeps a positive LR; past it the schedule holds its floor.
  EXPECT_NEAR(schedule.LearningRate(9), 1e-3 / 7, 1e-15);
  EXPECT_NEAR(schedule.Factor(10), 0.0, 1e-12);
  EXPECT_NEAR(schedule.Factor(50), 0.0, 1e-12);
}

TEST(LrSchedule, DecaysToLrMinAsARatioWithCosineAndSqrtShapes) {
  const LrSchedule cosine(Config(3, "cosine", 0.1), 10, 2.0);
  // step 9: progress 6/7; 0.1 + 0.9 · (1 + cos(6π/7)) / 2
  const double tail = 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 6 / 7));
  EXPECT_NEAR(cosine.Factor(9), tail, 1e-12);
  EXPECT_NEAR(cosine.LearningRate(9), 2.0 * tail, 1e-12);
  EXPECT_NEAR(cosine.Factor(3), 1.0, 1e-12);
  const LrSchedule sqrt(Config(3, "sqrt", 0.0), 10, 1.0);
  EXPECT_NEAR(sqrt.Factor(4), 1 - std::sqrt(1.0 / 7), 1e-12);
}

TEST(LrSchedule, HoldsTheStablePhaseUntilTheDecayRatioStarts) {
  // WSD: steps 10, warmup 2, decay_ratio 0.2 -> decay 2, stable 7.
  const LrSchedule wsd(Config(2, "linear", 0.0, 0.2), 10, 1.0);
  EXPECT_EQ(wsd.decay_steps(), 2);
  EXPECT_EQ(wsd.stable_steps(), 7);
  EXPECT_NEAR(wsd.Factor(0), 0.5, 1e-12);
  for (int64_t step = 1; step <= 8; ++step) EXPECT_NEAR(wsd.Factor(step), 1.0, 1e-12);
  EXPECT_NEAR(wsd.Factor(9), 0.5, 1e-12);
  // round(10 · 0.25) is 2 in Python (halves to even), not 3.
  EXPECT_EQ(LrSchedule(Config(2, "linear", 0.0, 0.25), 10, 1.0).decay_steps(), 2);
  EXPECT_EQ(LrSchedule(Config(2, "linear", 0.0, 0.35), 10, 1.0).decay_steps(), 4);
}

TEST(LrSchedule, ClampsWarmupAndDecayToTheTrainingSteps) {
  const LrSchedule long_warmup(Config(20, "linear", 0.0), 10, 1.0);
  EXPECT_EQ(long_warmup.warmup_steps(), 10);
  EXPECT_EQ(long_warmup.decay_steps(), 0);
  EXPECT_NEAR(long_warmup.Factor(0), 0.1, 1e-12);
  EXPECT_NEAR(long_warmup.Factor(9), 1.0, 1e-12);
  const LrSchedule long_decay(Config(5, "linear", 0.0, 0.9), 10, 1.0);
  EXPECT_EQ(long_decay.decay_steps(), 5);
  EXPECT_EQ(long_decay.stable_steps(), 1);
  // No warm-up at all: the first step runs at the peak.
  EXPECT_NEAR(LrSchedule(Config(0, "linear", 0.0), 10, 1.0).Factor(0), 1.0, 1e-12);
}

}  // namespace
}  // namespace flame::worker
