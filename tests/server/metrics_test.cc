#include "server/metrics.h"

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
