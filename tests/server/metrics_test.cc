#include "server/metrics.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

flame::v1::Job JobIn(flame::v1::JobState state) {
  flame::v1::Job job;
  job.set_id("j-0000beef");
  job.set_state(state);
  return job;
}

TEST(Metrics, EveryStateIsExportedFromTheStart) {
  Metrics metrics;
  const std::string text = metrics.Render();
  for (const char* state : {"queued", "starting", "running", "pausing", "paused", "restarting",
                            "cancelling", "succeeded", "failed", "cancelled"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("flame_jobs{state=\"", state, "\"} 0")));
  }
  EXPECT_THAT(text, Not(HasSubstr("unspecified")));
}

TEST(Metrics, StateCountsFollowTransitions) {
  Metrics metrics;
  const flame::v1::Job queued = JobIn(flame::v1::JOB_STATE_QUEUED);
  metrics.OnJobChanged(nullptr, queued);
  EXPECT_THAT(metrics.Render(), HasSubstr("flame_jobs{state=\"queued\"} 1"));
  const flame::v1::Job running = JobIn(flame::v1::JOB_STATE_RUNNING);
  metrics.OnJobChanged(&queued, running);
  const std::string text = metrics.Render();
  EXPECT_THAT(text, HasSubstr("flame_jobs{state=\"queued\"} 0"));
  EXPECT_THAT(text, HasSubstr("flame_jobs{state=\"running\"} 1"));
}

TEST(Metrics, ProgressBecomesPerJobGauges) {
  Metrics metrics;
  flame::v1::Job job = JobIn(flame::v1::JOB_STATE_RUNNING);
  flame::v1::Progress* progress = job.mutable_progress();
  progress->set_step(120);
  progress->set_loss(3.5);
  progress->set_lr(0.0003);
  progress->set_grad_norm(0.75);
  progress->set_tokens_per_second(2048);
  progress->set_tokens(491520);
  progress->set_mfu(12.5);
  metrics.OnJobChanged(nullptr, job);
  const std::string text = metrics.Render();
  EXPECT_THAT(text, HasSubstr("flame_job_step{job_id=\"j-0000beef\"} 120"));
  EXPECT_THAT(text, HasSubstr("flame_job_loss{job_id=\"j-0000beef\"} 3.5"));
  EXPECT_THAT(text, HasSubstr("flame_job_learning_rate{job_id=\"j-0000beef\"} 0.0003"));
  EXPECT_THAT(text, HasSubstr("flame_job_grad_norm{job_id=\"j-0000beef\"} 0.75"));
  EXPECT_THAT(text, HasSubstr("flame_job_tokens_per_second{job_id=\"j-0000beef\"} 2048"));
  EXPECT_THAT(text, HasSubstr("flame_job_tokens{job_id=\"j-0000beef\"} 491520"));
  EXPECT_THAT(text, HasSubstr("flame_job_mfu_percent{job_id=\"j-0000beef\"} 12.5"));
}

TEST(Metrics, ExportsFlamesOtherTrainingFacts) {
  Metrics metrics;
  flame::v1::Job job = JobIn(flame::v1::JOB_STATE_RUNNING);
  flame::v1::Progress* progress = job.mutable_progress();
  progress->set_step(40);
  progress->set_max_loss(3.75);
  progress->set_tflops(0.25);
  progress->set_step_seconds(0.5);
  progress->set_data_loading_seconds(0.125);
  progress->set_data_loading_share(25);
  progress->set_skipped_steps(3);
  progress->set_elapsed_seconds(90);
  progress->set_memory_gib(1);
  progress->set_memory_active_gib(0.5);
  progress->set_memory_peak_gib(2);
  metrics.OnJobChanged(nullptr, job);
  const std::string text = metrics.Render();
  const auto has = [&](const std::string& name, const std::string& value) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat(name, "{job_id=\"j-0000beef\"} ", value)));
  };
  has("flame_job_max_loss", "3.75");
  has("flame_job_model_flops_per_second", "250000000000");
  has("flame_job_step_seconds", "0.5");
  has("flame_job_data_loading_seconds", "0.125");
  has("flame_job_data_loading_percent", "25");
  has("flame_job_skipped_steps", "3");
  has("flame_job_elapsed_seconds", "90");
  has("flame_job_memory_bytes", "1073741824");
  has("flame_job_memory_active_bytes", "536870912");
  has("flame_job_memory_peak_bytes", "2147483648");
}

TEST(Metrics, EvalLossAppearsWithTheFirstEvaluation) {
  Metrics metrics;
  flame::v1::Job job = JobIn(flame::v1::JOB_STATE_RUNNING);
  job.mutable_progress()->set_step(10);
  metrics.OnJobChanged(nullptr, job);
  // No evaluation yet: no series, rather than a misleading loss of 0.
  EXPECT_THAT(metrics.Render(), Not(HasSubstr("flame_job_eval_loss{")));
  flame::v1::Job evaluated = job;
  evaluated.mutable_progress()->set_step(20);
  evaluated.mutable_progress()->set_eval_loss(4.5);
  evaluated.mutable_progress()->set_eval_step(20);
  metrics.OnJobChanged(&job, evaluated);
  const std::string text = metrics.Render();
  EXPECT_THAT(text, HasSubstr("flame_job_eval_loss{job_id=\"j-0000beef\"} 4.5"));
  EXPECT_THAT(text, HasSubstr("flame_job_eval_step{job_id=\"j-0000beef\"} 20"));
}

TEST(Metrics, RestartsOnlyCountUp) {
  Metrics metrics;
  flame::v1::Job job = JobIn(flame::v1::JOB_STATE_RUNNING);
  metrics.OnJobChanged(nullptr, job);
  flame::v1::Job restarted = job;
  restarted.set_restarts(2);
  metrics.OnJobChanged(&job, restarted);
  flame::v1::Job resumed = restarted;
  resumed.set_restarts(0);  // a resume renews the budget
  metrics.OnJobChanged(&restarted, resumed);
  EXPECT_THAT(metrics.Render(), HasSubstr("flame_job_restarts_total{job_id=\"j-0000beef\"} 2"));
}

TEST(Metrics, ServingOnPortZeroPicksAPort) {
  absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Serve("127.0.0.1:0");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT((*metrics)->port(), 0);
  // The same port again cannot be bound: a clear error, not an exception.
  absl::StatusOr<std::unique_ptr<Metrics>> clash =
      Metrics::Serve(absl::StrCat("127.0.0.1:", (*metrics)->port()));
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.status().message(), HasSubstr("cannot serve metrics"));
}

}  // namespace
}  // namespace flame::server
