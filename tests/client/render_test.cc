#include "client/render.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

flame::v1::Job RunningJob() {
  flame::v1::Job job;
  job.set_id("j-000001");
  job.set_name("tiny");
  job.set_state(flame::v1::JOB_STATE_RUNNING);
  job.set_create_time_ms(1'000'000);
  auto* progress = job.mutable_progress();
  progress->set_step(25);
  progress->set_total_steps(100);
  progress->set_loss(3.14159);
  progress->set_tokens_per_second(12345);
  progress->set_elapsed_seconds(50);  // 2 s a step: 75 steps left take 150 s
  return job;
}

TEST(FormatDuration, PicksTwoUnitsFromSecondsToDays) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(45.2), "45s");
  EXPECT_EQ(FormatDuration(59.6), "1m00s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(2 * 3600 + 3 * 60 + 59), "2h03m");
  EXPECT_EQ(FormatDuration(3 * 86400 + 4 * 3600 + 10), "3d04h");
  EXPECT_EQ(FormatDuration(-5), "0s");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::quiet_NaN()), "-");
}

TEST(FormatRate, KeepsThreeSignificantFigures) {
  EXPECT_EQ(FormatRate(0), "0");
  EXPECT_EQ(FormatRate(950), "950");
  EXPECT_EQ(FormatRate(1234), "1.23k");
  EXPECT_EQ(FormatRate(45678), "45.7k");
  EXPECT_EQ(FormatRate(999999), "1.00M");
  EXPECT_EQ(FormatRate(2.5e9), "2.50G");
}

TEST(StateName, DropsTheEnumPrefix) {
  EXPECT_EQ(StateName(flame::v1::JOB_STATE_SUCCEEDED), "SUCCEEDED");
  EXPECT_EQ(StateName(flame::v1::JOB_STATE_QUEUED), "QUEUED");
}

TEST(IsStoppedState, IncludesPausedButIsTerminalStateDoesNot) {
  EXPECT_TRUE(IsStoppedState(flame::v1::JOB_STATE_PAUSED));
  EXPECT_FALSE(IsTerminalState(flame::v1::JOB_STATE_PAUSED));
  EXPECT_TRUE(IsTerminalState(flame::v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsStoppedState(flame::v1::JOB_STATE_RUNNING));
  EXPECT_FALSE(IsStoppedState(flame::v1::JOB_STATE_PAUSING));
}

TEST(RenderProgressBar, FillsInProportionAndClamps) {
  EXPECT_EQ(RenderProgressBar(0, 100, 10), "[..........]");
  EXPECT_EQ(RenderProgressBar(25, 100, 10), "[##........]");
  EXPECT_EQ(RenderProgressBar(100, 100, 10), "[##########]");
  EXPECT_EQ(RenderProgressBar(150, 100, 4), "[####]");
  EXPECT_EQ(RenderProgressBar(5, 0, 4), "[....]");
}

TEST(EstimateRemainingSeconds, UsesTheAveragePaceSoFar) {
  const flame::v1::Job job = RunningJob();
  EXPECT_DOUBLE_EQ(*EstimateRemainingSeconds(job.progress(), 100), 150.0);
  flame::v1::Progress fresh;
  EXPECT_FALSE(EstimateRemainingSeconds(fresh, 100).has_value());
}

TEST(TotalSteps, FallsBackToTheSpecBeforeTheFirstReport) {
  flame::v1::Job job;
  job.mutable_spec()->mutable_training()->set_steps(40);
  EXPECT_EQ(TotalSteps(job), 40);
  job.mutable_progress()->set_total_steps(50);
  EXPECT_EQ(TotalSteps(job), 50);
}

TEST(RenderWatchLine, ShowsStepLossRateAndEta) {
  const std::string line = RenderWatchLine(RunningJob());
  EXPECT_THAT(line, StartsWith("RUNNING  [######"));
  EXPECT_THAT(line, HasSubstr("25/100  25%"));
  EXPECT_THAT(line, HasSubstr("loss 3.1416"));
  EXPECT_THAT(line, HasSubstr("12.3k tok/s"));
  EXPECT_THAT(line, HasSubstr("ETA 2m30s"));
  EXPECT_THAT(line, Not(HasSubstr("\n")));
}

TEST(RenderWatchLine, AStoppedJobShowsWhyInsteadOfAnEta) {
  flame::v1::Job job = RunningJob();
  job.set_state(flame::v1::JOB_STATE_FAILED);
  job.set_message("rank 0 exited with code 1");
  const std::string line = RenderWatchLine(job);
  EXPECT_THAT(line, StartsWith("FAILED"));
  EXPECT_THAT(line, HasSubstr("(rank 0 exited with code 1)"));
  EXPECT_THAT(line, Not(HasSubstr("ETA")));
}

TEST(RenderWatchLine, AQueuedJobHasNoLossYet) {
  flame::v1::Job job;
  job.set_state(flame::v1::JOB_STATE_QUEUED);
  job.mutable_spec()->mutable_training()->set_steps(40);
  EXPECT_EQ(RenderWatchLine(job), "QUEUED  [........................]  0/40  0%");
}

TEST(RenderJobTable, AlignsColumnsUnderAHeader) {
  flame::v1::Job second;
  second.set_id("j-000002");
  second.set_state(flame::v1::JOB_STATE_QUEUED);
  second.set_create_time_ms(1'000'000);
  const std::string table = RenderJobTable({RunningJob(), second}, 1'000'000 + 125'000);
  const std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << table;
  EXPECT_THAT(lines[0], StartsWith("ID        NAME  STATE    STEP    LOSS    TOKENS/S  AGE"));
  EXPECT_EQ(lines[1], "j-000001  tiny  RUNNING  25/100  3.1416  12.3k     2m05s");
  EXPECT_EQ(lines[2], "j-000002  -     QUEUED   0       -       -         2m05s");
}

TEST(RenderJobDetails, ListsFactsAndAttempts) {
  flame::v1::Job job = RunningJob();
  auto* attempt = job.add_attempts();
  attempt->set_number(1);
  attempt->set_outcome(flame::v1::ATTEMPT_OUTCOME_CANCELLED);
  attempt->set_message("cancelled by user");
  attempt = job.add_attempts();
  attempt->set_number(2);
  attempt->set_start_step(20);
  auto* checkpoint = job.add_checkpoints();
  checkpoint->set_step(20);
  checkpoint->set_path("/dump/checkpoint/step-20");
  const std::string text = RenderJobDetails(job, 1'000'000 + 10'000);
  EXPECT_THAT(text, HasSubstr("state       RUNNING\n"));
  EXPECT_THAT(text, HasSubstr("step        25/100 25%\n"));
  EXPECT_THAT(text, HasSubstr("eta         2m30s\n"));
  EXPECT_THAT(text, HasSubstr("checkpoint  step 20 /dump/checkpoint/step-20\n"));
  EXPECT_THAT(text, HasSubstr("#1       0          cancelled  cancelled by user"));
  EXPECT_THAT(text, HasSubstr("#2       20         running"));
}

TEST(RenderJobDetails, ShowsTheTrainingFactsOfTheLatestReport) {
  flame::v1::Job job = RunningJob();
  auto* progress = job.mutable_progress();
  progress->set_max_loss(3.5);
  progress->set_eval_loss(3.25);
  progress->set_eval_step(20);
  progress->set_skipped_steps(2);
  progress->set_tflops(0.5);
  progress->set_memory_gib(1.5);
  progress->set_memory_peak_gib(2);
  progress->set_data_loading_share(12.5);
  progress->set_data_loading_seconds(0.25);
  // Labels are padded to the widest ("eval loss", "grad norm", "data wait") plus two spaces.
  const std::string text = RenderJobDetails(job, 1'000'000);
  EXPECT_THAT(text, HasSubstr("loss       3.1416 (max over ranks 3.5000)\n"));
  EXPECT_THAT(text, HasSubstr("eval loss  3.2500 at step 20\n"));
  EXPECT_THAT(text, HasSubstr("skipped    2 updates"));
  // No peak FLOPS on CPU: MFU is shown as undefined, the achieved TFLOPS still are.
  EXPECT_THAT(text, HasSubstr("mfu        - (no peak FLOPS for this device; 0.5 TFLOPS"));
  EXPECT_THAT(text, HasSubstr("memory     1.50 GiB (peak 2.00 GiB)\n"));
  EXPECT_THAT(text, HasSubstr("data wait  12.5% of the step time (0.250s per step)\n"));
  progress->set_mfu(41.25);
  progress->set_memory_active_gib(1.25);
  const std::string on_gpu = RenderJobDetails(job, 1'000'000);
  EXPECT_THAT(on_gpu, HasSubstr("mfu        41.25% (0.5 TFLOPS per device)\n"));
  EXPECT_THAT(on_gpu, HasSubstr("(peak 2.00 GiB, active 1.25 GiB)"));
}

TEST(RenderWatchLine, ShowsTheLatestEvalLossOnceThereIsOne) {
  flame::v1::Job job = RunningJob();
  EXPECT_THAT(RenderWatchLine(job), Not(HasSubstr("eval")));
  job.mutable_progress()->set_eval_loss(2.71828);
  job.mutable_progress()->set_eval_step(20);
  EXPECT_THAT(RenderWatchLine(job), HasSubstr("loss 3.1416  eval 2.7183  12.3k tok/s"));
}

TEST(RenderJobSummary, NamesTheJobAndItsState) {
  flame::v1::Job job = RunningJob();
  job.set_state(flame::v1::JOB_STATE_CANCELLING);
  EXPECT_EQ(RenderJobSummary(job), "job j-000001 (tiny): CANCELLING");
}

}  // namespace
}  // namespace flame::client
