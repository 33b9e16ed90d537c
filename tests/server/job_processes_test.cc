// JobManager driving real worker processes (LocalLauncher + the fake worker script): logs are
// captured and process exits become job states.
#include <memory>

#include "common/clock.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_manager.h"
#include "server/job_state_machine.h"
#include "server/local_launcher.h"
#include "tests/server/fake_worker.h"
#include "tests/server/test_util.h"

namespace flame::server::testing {
namespace {

using ::testing::HasSubstr;

class JobProcessesTest : public ::testing::Test {
 protected:
  JobProcessesTest() : launcher_(InstallFakeWorker(dir_.path())) {
    JobManagerOptions options;
    options.data_dir = dir_.path();
    options.coordinator_address = "127.0.0.1:7470";
    options.kill_grace = absl::Seconds(2);
    manager_ = std::make_unique<JobManager>(options, SlotPool{SlotKind::kCpu, 2}, &store_,
                                            &launcher_, SystemClock::Get(), nullptr);
    EXPECT_TRUE(manager_->Recover().ok());
  }

  // Supervises until the job settles (or 20 s pass) and returns it.
  flame::v1::Job RunUntilSettled(const std::string& id) {
    WaitFor([&] {
      manager_->Supervise();
      return IsSettled(manager_->Get(id)->state());
    });
    return *manager_->Get(id);
  }

  void JoinAndFinish(const flame::v1::Job& job, flame::v1::FinishReason reason) {
    for (int rank = 0; rank < job.spec().resources().ranks(); ++rank) {
      flame::v1::WorkerIdentity worker;
      worker.set_job_id(job.id());
      worker.set_attempt(job.attempts().rbegin()->number());
      worker.set_rank(rank);
      flame::v1::JoinRequest join;
      *join.mutable_worker() = worker;
      ASSERT_TRUE(manager_->Join(join).ok());
      flame::v1::FinishRequest finish;
      *finish.mutable_worker() = worker;
      finish.set_reason(reason);
      ASSERT_TRUE(manager_->Finish(finish).ok());
    }
  }

  TempDir dir_;
  MemoryJobStore store_;
  LocalLauncher launcher_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobProcessesTest, WorkersThatFinishAndExitCleanlyMakeTheJobSucceed) {
  absl::StatusOr<flame::v1::Job> job = manager_->Submit(ValidSpec(dir_.path(), 2), "");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), flame::v1::JOB_STATE_STARTING);
  JoinAndFinish(*job, flame::v1::FINISH_REASON_COMPLETED);
  ReleaseWorkers(dir_.path(), job->id(), 1, 0);

  const flame::v1::Job done = RunUntilSettled(job->id());
  EXPECT_EQ(done.state(), flame::v1::JOB_STATE_SUCCEEDED) << done.message();
  for (const flame::v1::RankProcess& rank : done.attempts(0).ranks()) {
    EXPECT_TRUE(rank.exited());
    EXPECT_EQ(rank.exit_code(), 0);
    const std::string log = *ReadFileToString(rank.log_path());
    EXPECT_THAT(log, HasSubstr(absl::StrCat("rank=", rank.rank(), " local_rank=", rank.rank(),
                                            " world=2 job=", job->id(), " attempt=1")));
    EXPECT_THAT(log, HasSubstr("coordinator=127.0.0.1:7470"));
  }
}

TEST_F(JobProcessesTest, ANonZeroExitFailsTheJobAfterItsRestartsAreUsed) {
  flame::v1::JobSpec spec = ValidSpec(dir_.path(), 1);
  spec.mutable_resources()->set_max_restarts(1);
  absl::StatusOr<flame::v1::Job> job = manager_->Submit(spec, "");
  ASSERT_TRUE(job.ok()) << job.status();
  ReleaseWorkers(dir_.path(), job->id(), 1, 3);
  ReleaseWorkers(dir_.path(), job->id(), 2, 3);

  const flame::v1::Job failed = RunUntilSettled(job->id());
  EXPECT_EQ(failed.state(), flame::v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed.message(), HasSubstr("code 3"));
  ASSERT_EQ(failed.attempts_size(), 2);
  EXPECT_EQ(failed.attempts(0).ranks(0).exit_code(), 3);
  EXPECT_EQ(failed.restarts(), 1);
  const std::string log = *ReadFileToString(failed.attempts(1).ranks(0).log_path());
  EXPECT_THAT(log, HasSubstr("attempt 1 rank 0"));
  EXPECT_THAT(log, HasSubstr("attempt 2 rank 0"));
}

TEST_F(JobProcessesTest, ACancelledJobsWorkersAreTerminatedWhenTheyDoNotStop) {
  JobManagerOptions options;
  options.data_dir = dir_.path();
  options.coordinator_address = "127.0.0.1:7470";
  options.stop_grace = absl::Milliseconds(100);
  options.kill_grace = absl::Seconds(2);
  manager_ = std::make_unique<JobManager>(options, SlotPool{SlotKind::kCpu, 2}, &store_, &launcher_,
                                          SystemClock::Get(), nullptr);
  ASSERT_TRUE(manager_->Recover().ok());
  absl::StatusOr<flame::v1::Job> job = manager_->Submit(ValidSpec(dir_.path(), 2), "");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(manager_->Cancel(job->id()).ok());
  // The script never asks for directives, so only SIGTERM ends it.
  const flame::v1::Job cancelled = RunUntilSettled(job->id());
  EXPECT_EQ(cancelled.state(), flame::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled.attempts(0).ranks(0).exit_code(), 128 + SIGTERM);
}

}  // namespace
}  // namespace flame::server::testing
