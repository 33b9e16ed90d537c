#include "server/job_history.h"

#include "gtest/gtest.h"

namespace flame::server {
namespace {

using flame::v1::MetricPoint;
using History = google::protobuf::RepeatedPtrField<MetricPoint>;

MetricPoint PointAt(int64_t step) {
  MetricPoint point;
  point.set_step(step);
  point.set_loss(10.0 / static_cast<double>(step + 1));
  return point;
}

TEST(JobHistory, NeverHoldsMoreThanItsCapacity) {
  History history;
  for (int64_t step = 1; step <= 10'000; ++step) {
    AppendHistoryPoint(&history, PointAt(step), 64);
    ASSERT_LE(history.size(), 64) << "at step " << step;
  }
}

TEST(JobHistory, KeepsTheFirstAndTheNewestPoints) {
  History history;
  for (int64_t step = 1; step <= 1000; ++step) AppendHistoryPoint(&history, PointAt(step), 32);
  EXPECT_EQ(history.Get(0).step(), 1);
  EXPECT_EQ(history.Get(history.size() - 1).step(), 1000);
  EXPECT_EQ(history.Get(history.size() - 2).step(), 999);  // recent steps at full resolution
}

TEST(JobHistory, StaysInStepOrder) {
  History history;
  for (int64_t step = 1; step <= 500; ++step) AppendHistoryPoint(&history, PointAt(step), 16);
  for (int i = 1; i < history.size(); ++i) {
    EXPECT_LT(history.Get(i - 1).step(), history.Get(i).step()) << "at index " << i;
  }
}

TEST(JobHistory, ThinsOlderPointsMoreThanNewerOnes) {
  History history;
  for (int64_t step = 1; step <= 2000; ++step) AppendHistoryPoint(&history, PointAt(step), 64);
  const int n = history.size();
  const int64_t old_gap = history.Get(2).step() - history.Get(1).step();
  const int64_t new_gap = history.Get(n - 1).step() - history.Get(n - 2).step();
  EXPECT_GT(old_gap, new_gap);
}

TEST(JobHistory, ARepeatedStepReplacesTheTailFromThatStep) {
  History history;
  for (int64_t step = 10; step <= 50; step += 10) AppendHistoryPoint(&history, PointAt(step), 16);
  // A restarted attempt resumed from the checkpoint at step 30 and logs step 30 again.
  MetricPoint again = PointAt(30);
  again.set_loss(1.5);
  AppendHistoryPoint(&history, again, 16);
  ASSERT_EQ(history.size(), 3);
  EXPECT_EQ(history.Get(2).step(), 30);
  EXPECT_DOUBLE_EQ(history.Get(2).loss(), 1.5);
}

TEST(JobHistory, APointCarriesTheProgressFields) {
  flame::v1::Progress progress;
  progress.set_step(7);
  progress.set_loss(2.5);
  progress.set_lr(3e-4);
  progress.set_grad_norm(0.9);
  progress.set_tokens_per_second(1234);
  progress.set_update_time_ms(42);
  const MetricPoint point = HistoryPointFromProgress(progress);
  EXPECT_EQ(point.step(), 7);
  EXPECT_DOUBLE_EQ(point.loss(), 2.5);
  EXPECT_DOUBLE_EQ(point.lr(), 3e-4);
  EXPECT_DOUBLE_EQ(point.grad_norm(), 0.9);
  EXPECT_DOUBLE_EQ(point.tokens_per_second(), 1234);
  EXPECT_EQ(point.time_ms(), 42);
}

TEST(JobHistory, APointKeepsTheEvalLossOnlyAtTheStepItWasMeasured) {
  flame::v1::Progress progress;
  progress.set_step(100);
  progress.set_loss(4.5);
  progress.set_max_loss(4.75);
  progress.set_tokens(51200);
  progress.set_mfu(12.5);
  progress.set_eval_loss(4.25);
  progress.set_eval_step(100);
  const MetricPoint at_eval = HistoryPointFromProgress(progress);
  EXPECT_DOUBLE_EQ(at_eval.max_loss(), 4.75);
  EXPECT_EQ(at_eval.tokens(), 51200);
  EXPECT_DOUBLE_EQ(at_eval.mfu(), 12.5);
  ASSERT_TRUE(at_eval.has_eval_loss());
  EXPECT_DOUBLE_EQ(at_eval.eval_loss(), 4.25);
  // Later reports repeat the latest evaluation; their points do not claim it as their own.
  progress.set_step(110);
  EXPECT_FALSE(HistoryPointFromProgress(progress).has_eval_loss());
}

}  // namespace
}  // namespace flame::server
