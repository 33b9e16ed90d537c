// JobManager after a flamed restart: the same store and the same processes, a new manager.
#include <signal.h>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/job_manager.h"
#include "tests/server/job_manager_test_base.h"

namespace flame::server::testing {
namespace {

using google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

class JobManagerRecoveryTest : public JobManagerTest {
 protected:
  void SetUp() override { StartManager(SlotPool{SlotKind::kCpu, 2}); }
};

TEST_F(JobManagerRecoveryTest, EveryJobIsShownUnchangedAfterARestart) {
  const std::string done = Submit(Spec(1)).id();
  JoinAll(done);
  ASSERT_TRUE(Progress(done, 100, 1.5).ok());
  FinishAll(done, flame::v1::FINISH_REASON_COMPLETED);
  const std::string cancelled = Submit(Spec(2)).id();
  ASSERT_TRUE(manager_->Cancel(cancelled).ok());
  JoinAll(cancelled);
  FinishAll(cancelled, flame::v1::FINISH_REASON_STOPPED);
  const std::string running = Submit(Spec(2)).id();
  const std::string queued = Submit(Spec(2)).id();
  const std::vector<flame::v1::Job> before = manager_->List({});
  ASSERT_EQ(before.size(), 4u);

  StartManager(SlotPool{SlotKind::kCpu, 2});  // the processes of `running` are still alive
  const std::vector<flame::v1::Job> after = manager_->List({});
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(before[i], after[i]))
        << "job " << before[i].id() << " changed:\n"
        << before[i].DebugString() << "\nvs\n"
        << after[i].DebugString();
  }
  EXPECT_EQ(StateOf(queued), flame::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(StateOf(running), flame::v1::JOB_STATE_STARTING);
}

TEST_F(JobManagerRecoveryTest, LiveWorkersAreReattachedAndTheirFinishDecides) {
  const std::string id = Submit(Spec(2)).id();
  JoinAll(id);
  ASSERT_TRUE(Progress(id, 40, 3.0).ok());
  const size_t launches = launcher_.launches.size();

  StartManager(SlotPool{SlotKind::kCpu, 2});
  manager_->Supervise();
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(launcher_.launches.size(), launches);  // reattached, not relaunched
  ASSERT_TRUE(Heartbeat(id, 0).ok());              // the same attempt is still current

  // Exit codes of processes a new flamed did not start are unknown; their Finish decides.
  for (int rank = 0; rank < 2; ++rank) {
    flame::v1::FinishRequest finish;
    *finish.mutable_worker() = Worker(id, rank);
    finish.set_reason(flame::v1::FINISH_REASON_COMPLETED);
    ASSERT_TRUE(manager_->Finish(finish).ok());
    launcher_.SetAlive(PidOf(id, rank), false);
  }
  manager_->Supervise();
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_SUCCEEDED);
}

TEST_F(JobManagerRecoveryTest, ReattachedWorkersKeepTheirSlots) {
  const std::string running = Submit(Spec(2)).id();
  JoinAll(running);
  StartManager(SlotPool{SlotKind::kCpu, 2});
  const std::string waiting = Submit(Spec(1)).id();
  manager_->Supervise();
  EXPECT_EQ(StateOf(waiting), flame::v1::JOB_STATE_QUEUED);
}

TEST_F(JobManagerRecoveryTest, WorkersThatVanishedWithoutFinishingLoseTheAttempt) {
  const std::string id = Submit(Spec(2)).id();
  JoinAll(id);
  launcher_.SetAlive(PidOf(id, 0), false);
  launcher_.SetAlive(PidOf(id, 1), false);

  StartManager(SlotPool{SlotKind::kCpu, 2});
  manager_->Supervise();
  const flame::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.attempts(0).outcome(), flame::v1::ATTEMPT_OUTCOME_LOST);
  EXPECT_THAT(job.message(), HasSubstr("without a Finish"));
}

TEST_F(JobManagerRecoveryTest, ALostAttemptIsRestartedWithinBudget) {
  flame::v1::JobSpec spec = Spec(1);
  spec.mutable_resources()->set_max_restarts(2);
  const std::string id = Submit(spec).id();
  JoinAll(id);
  launcher_.SetAlive(PidOf(id, 0), false);

  StartManager(SlotPool{SlotKind::kCpu, 2});
  manager_->Supervise();
  const flame::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_STARTING);
  EXPECT_EQ(job.restarts(), 1);
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(0).outcome(), flame::v1::ATTEMPT_OUTCOME_LOST);
}

TEST_F(JobManagerRecoveryTest, QueuedJobsAreScheduledAfterARestart) {
  const std::string first = Submit(Spec(2)).id();
  const std::string second = Submit(Spec(2)).id();
  JoinAll(first);
  FinishAll(first, flame::v1::FINISH_REASON_COMPLETED);
  ASSERT_EQ(StateOf(second), flame::v1::JOB_STATE_STARTING);
  const std::string third = Submit(Spec(1)).id();
  ASSERT_EQ(StateOf(third), flame::v1::JOB_STATE_QUEUED);
  // `second` ends while flamed is down, leaving `third` to be scheduled by the new flamed.
  launcher_.Exit(PidOf(second, 0), 1);
  launcher_.Exit(PidOf(second, 1), 1);

  StartManager(SlotPool{SlotKind::kCpu, 2});
  EXPECT_EQ(StateOf(third), flame::v1::JOB_STATE_QUEUED);
  manager_->Supervise();
  EXPECT_EQ(StateOf(second), flame::v1::JOB_STATE_FAILED);
  EXPECT_EQ(StateOf(third), flame::v1::JOB_STATE_STARTING);
}

TEST_F(JobManagerRecoveryTest, ACancelInProgressContinuesAfterARestart) {
  launcher_.obey_signals = false;
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  ASSERT_TRUE(manager_->Cancel(id).ok());
  StartManager(SlotPool{SlotKind::kCpu, 2});
  EXPECT_EQ(*Heartbeat(id, 0), flame::v1::WORKER_ACTION_STOP);
  clock_.AdvanceMs(31'000);
  ASSERT_TRUE(Heartbeat(id, 0).ok());
  manager_->Supervise();
  ASSERT_FALSE(launcher_.signals.empty());
  EXPECT_EQ(launcher_.signals.back().second, SIGTERM);
}

}  // namespace
}  // namespace flame::server::testing
