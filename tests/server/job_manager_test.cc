// JobManager: submission, placement, the worker calls, and how exits become job states.
#include "server/job_manager.h"

#include <signal.h>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/job_manager_test_base.h"

namespace flame::server::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class JobManagerSubmitTest : public JobManagerTest {
 protected:
  void SetUp() override { StartManager(); }
};

TEST_F(JobManagerSubmitTest, ASubmittedJobIsResolvedStoredAndStarted) {
  const flame::v1::Job job = Submit(Spec(2));
  EXPECT_THAT(job.id(), MatchesRegex("j-[0-9a-f]{8}"));
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_STARTING);
  EXPECT_DOUBLE_EQ(job.spec().optimizer().lr(), 8e-4);  // flame's default, resolved
  EXPECT_EQ(job.spec().job().dump_folder(), dir_.path() + "/jobs/" + job.id() + "/dump");
  EXPECT_EQ(job.job_dir(), dir_.path() + "/jobs/" + job.id());
  EXPECT_FALSE(job.spec_hash().empty());
  EXPECT_EQ(job.progress().total_steps(), 100);
  ASSERT_NE(store_.Stored(job.id()), nullptr);
  EXPECT_EQ(store_.Stored(job.id())->state(), flame::v1::JOB_STATE_STARTING);

  ASSERT_EQ(launcher_.launches.size(), 1u);
  const LaunchRequest& launch = launcher_.launches[0];
  EXPECT_EQ(launch.job_id, job.id());
  EXPECT_EQ(launch.attempt, 1);
  EXPECT_EQ(launch.coordinator_address, "127.0.0.1:7470");
  EXPECT_THAT(launch.slots, ElementsAre(0, 1));
  EXPECT_EQ(launch.log_dir, job.job_dir() + "/logs");
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).ranks_size(), 2);
  EXPECT_EQ(job.attempts(0).ranks(1).slot(), 1);
}

TEST_F(JobManagerSubmitTest, ARelativeDumpFolderIsTakenInsideTheJobDirectory) {
  flame::v1::JobSpec spec = Spec();
  spec.mutable_job()->set_dump_folder("exp/run1");
  const flame::v1::Job job = Submit(spec);
  EXPECT_EQ(job.spec().job().dump_folder(), job.job_dir() + "/exp/run1");
}

TEST_F(JobManagerSubmitTest, AnInvalidSpecIsRefusedAndNothingIsStored) {
  flame::v1::JobSpec spec = Spec();
  spec.mutable_training()->set_steps(-5);
  absl::StatusOr<flame::v1::Job> job = manager_->Submit(spec, "");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("training.steps"));
  EXPECT_EQ(store_.size(), 0u);
  EXPECT_TRUE(manager_->List({}).empty());
  EXPECT_TRUE(launcher_.launches.empty());
}

TEST_F(JobManagerSubmitTest, AMissingDataFileIsRefusedByName) {
  flame::v1::JobSpec spec = Spec();
  spec.mutable_training()->set_dataset(dir_.path() + "/nope.jsonl");
  absl::StatusOr<flame::v1::Job> job = manager_->Submit(spec, "");
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("training.dataset"));
  EXPECT_THAT(job.status().message(), HasSubstr("nope.jsonl"));
  EXPECT_EQ(store_.size(), 0u);
}

TEST_F(JobManagerSubmitTest, AJobBiggerThanTheHostIsRefusedAtSubmit) {
  absl::StatusOr<flame::v1::Job> job = manager_->Submit(Spec(5), "");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("has 4"));
  EXPECT_EQ(store_.size(), 0u);
}

TEST_F(JobManagerSubmitTest, ACudaJobIsRefusedOnAHostWithoutGpus) {
  flame::v1::JobSpec spec = Spec();
  spec.mutable_resources()->set_device("cuda");
  absl::StatusOr<flame::v1::Job> job = manager_->Submit(spec, "");
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("no GPUs"));
}

TEST_F(JobManagerSubmitTest, ARepeatedIdempotencyKeyReturnsTheFirstJob) {
  absl::StatusOr<flame::v1::Job> first = manager_->Submit(Spec(), "key-1");
  absl::StatusOr<flame::v1::Job> again = manager_->Submit(Spec(), "key-1");
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->id(), again->id());
  EXPECT_EQ(store_.size(), 1u);
  EXPECT_EQ(launcher_.launches.size(), 1u);
}

TEST_F(JobManagerSubmitTest, AFailedWriteLeavesNoJobBehind) {
  store_.fail = true;
  absl::StatusOr<flame::v1::Job> job = manager_->Submit(Spec(), "");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(manager_->List({}).empty());
  EXPECT_TRUE(launcher_.launches.empty());
  store_.fail = false;
  EXPECT_EQ(Submit(Spec()).sequence(), 1);
}

TEST_F(JobManagerSubmitTest, ListsJobsInSubmissionOrderAndFiltersByState) {
  const flame::v1::Job a = Submit(Spec(4));
  const flame::v1::Job b = Submit(Spec(1));  // waits: a holds every slot
  const std::vector<flame::v1::Job> all = manager_->List({});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id(), a.id());
  EXPECT_EQ(all[1].id(), b.id());
  const std::vector<flame::v1::Job> queued = manager_->List({flame::v1::JOB_STATE_QUEUED});
  ASSERT_EQ(queued.size(), 1u);
  EXPECT_EQ(queued[0].id(), b.id());
  EXPECT_EQ(manager_->Get("j-missing").status().code(), absl::StatusCode::kNotFound);
}

class JobManagerRunTest : public JobManagerTest {
 protected:
  void SetUp() override { StartManager(SlotPool{SlotKind::kCpu, 2}); }
};

TEST_F(JobManagerRunTest, AJobRunsOnceEveryRankHasJoined) {
  const std::string id = Submit(Spec(2)).id();
  flame::v1::JoinRequest join;
  *join.mutable_worker() = Worker(id, 0);
  absl::StatusOr<flame::v1::JoinResponse> response = manager_->Join(join);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->world_size(), 2);
  EXPECT_EQ(response->dump_folder(), Get(id).spec().job().dump_folder());
  EXPECT_EQ(response->spec().training().steps(), 100);
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_STARTING);
  *join.mutable_worker() = Worker(id, 1);
  ASSERT_TRUE(manager_->Join(join).ok());
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(store_.Stored(id)->state(), flame::v1::JOB_STATE_RUNNING);
}

TEST_F(JobManagerRunTest, ProgressIsStoredWithItsHistory) {
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  ASSERT_EQ(*Progress(id, 10, 7.5), flame::v1::WORKER_ACTION_CONTINUE);
  ASSERT_EQ(*Progress(id, 20, 6.0), flame::v1::WORKER_ACTION_CONTINUE);
  const flame::v1::Job job = *store_.Stored(id);
  EXPECT_EQ(job.progress().step(), 20);
  EXPECT_DOUBLE_EQ(job.progress().loss(), 6.0);
  EXPECT_EQ(job.progress().total_steps(), 100);
  EXPECT_EQ(job.progress().update_time_ms(), clock_.NowMs());
  ASSERT_EQ(job.history_size(), 2);
  EXPECT_EQ(job.history(0).step(), 10);
}

TEST_F(JobManagerRunTest, AProgressReportThatCannotBeStoredIsRefused) {
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  store_.fail = true;
  EXPECT_FALSE(Progress(id, 10, 7.5).ok());
  EXPECT_EQ(Get(id).progress().step(), 0);  // memory did not run ahead of the store
}

TEST_F(JobManagerRunTest, ACompletedRunSucceedsAndFreesItsSlots) {
  const std::string id = Submit(Spec(2)).id();
  const std::string next = Submit(Spec(1)).id();
  EXPECT_EQ(StateOf(next), flame::v1::JOB_STATE_QUEUED);
  JoinAll(id);
  ASSERT_TRUE(Progress(id, 100, 2.0).ok());
  FinishAll(id, flame::v1::FINISH_REASON_COMPLETED);
  const flame::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.attempts(0).outcome(), flame::v1::ATTEMPT_OUTCOME_SUCCEEDED);
  EXPECT_NE(job.attempts(0).end_time_ms(), 0);
  EXPECT_NE(job.end_time_ms(), 0);
  EXPECT_THAT(job.message(), HasSubstr("step 100"));
  EXPECT_EQ(StateOf(next), flame::v1::JOB_STATE_STARTING);  // placed in the same pass
}

TEST_F(JobManagerRunTest, ARankThatExitsNonZeroTearsDownTheMeshAndFailsTheJob) {
  launcher_.obey_signals = false;  // rank 0 hangs in a collective and ignores SIGTERM
  const std::string id = Submit(Spec(2)).id();
  JoinAll(id);
  launcher_.Exit(PidOf(id, 1), 3);
  manager_->Supervise();
  flame::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("rank 1"));
  EXPECT_THAT(job.message(), HasSubstr("code 3"));
  EXPECT_EQ(job.attempts(0).outcome(), flame::v1::ATTEMPT_OUTCOME_FAILED);
  ASSERT_EQ(launcher_.signals.size(), 1u);
  EXPECT_EQ(launcher_.signals[0], std::make_pair(PidOf(id, 0), SIGTERM));

  // Its slots stay taken until the last rank is gone.
  EXPECT_EQ(manager_->Resume(id).status().code(), absl::StatusCode::kFailedPrecondition);
  clock_.AdvanceMs(10'001);
  manager_->Supervise();
  EXPECT_EQ(launcher_.signals.back(), std::make_pair(PidOf(id, 0), SIGKILL));
  launcher_.Exit(PidOf(id, 0), 128 + SIGKILL);
  manager_->Supervise();
  job = Get(id);
  EXPECT_TRUE(job.attempts(0).ranks(0).exited());
  EXPECT_EQ(job.attempts(0).ranks(0).exit_code(), 128 + SIGKILL);
  EXPECT_NE(job.attempts(0).end_time_ms(), 0);
  EXPECT_TRUE(manager_->Resume(id).ok());
}

TEST_F(JobManagerRunTest, AFailedAttemptRestartsWhileTheBudgetLasts) {
  flame::v1::JobSpec spec = Spec(2);
  spec.mutable_resources()->set_max_restarts(1);
  const std::string id = Submit(spec).id();
  JoinAll(id);
  launcher_.Exit(PidOf(id, 0), 1);
  manager_->Supervise();  // rank 0 failed; rank 1 is terminated and exits
  manager_->Supervise();  // nothing runs: the next attempt starts on the same slots
  flame::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_STARTING);
  EXPECT_EQ(job.restarts(), 1);
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(1).number(), 2);
  EXPECT_THAT(launcher_.launches.back().slots, ElementsAre(0, 1));

  // Reports from the old attempt are fenced off.
  flame::v1::HeartbeatRequest stale;
  *stale.mutable_worker() = Worker(id, 0, /*attempt=*/1);
  EXPECT_EQ(manager_->Heartbeat(stale).status().code(), absl::StatusCode::kFailedPrecondition);

  JoinAll(id);
  launcher_.Exit(PidOf(id, 1), 2);
  manager_->Supervise();
  job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("no restarts left"));
}

TEST_F(JobManagerRunTest, AnErrorReportedByARankFailsTheAttemptAtOnce) {
  const std::string id = Submit(Spec(2)).id();
  JoinAll(id);
  flame::v1::FinishRequest finish;
  *finish.mutable_worker() = Worker(id, 1);
  finish.set_reason(flame::v1::FINISH_REASON_ERROR);
  finish.set_message("loss is NaN");
  ASSERT_TRUE(manager_->Finish(finish).ok());
  const flame::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("loss is NaN"));
  EXPECT_EQ(launcher_.signals.size(), 2u);  // both ranks torn down
}

TEST_F(JobManagerRunTest, ZeroExitWithoutFinishIsAFailure) {
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  launcher_.Exit(PidOf(id, 0), 0);
  manager_->Supervise();
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Get(id).message(), HasSubstr("without reporting Finish"));
}

TEST_F(JobManagerRunTest, WorkersThatPauseUnaskedFailTheJobWithAReason) {
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  FinishAll(id, flame::v1::FINISH_REASON_PAUSED);
  const flame::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.attempts(0).outcome(), flame::v1::ATTEMPT_OUTCOME_PAUSED);
  EXPECT_THAT(job.message(), HasSubstr("without a pause request"));
}

TEST_F(JobManagerRunTest, AQueuedJobIsCancelledAtOnce) {
  const std::string running = Submit(Spec(2)).id();
  const std::string queued = Submit(Spec(1)).id();
  absl::StatusOr<flame::v1::Job> cancelled = manager_->Cancel(queued);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), flame::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(store_.Stored(queued)->state(), flame::v1::JOB_STATE_CANCELLED);
  JoinAll(running);
  FinishAll(running, flame::v1::FINISH_REASON_COMPLETED);
  EXPECT_EQ(launcher_.launches.size(), 1u);  // the cancelled job never started
}

TEST_F(JobManagerRunTest, ARunningJobIsToldToStopAndEndsCancelled) {
  const std::string id = Submit(Spec(2)).id();
  JoinAll(id);
  ASSERT_TRUE(Progress(id, 30, 4.0).ok());
  ASSERT_EQ(manager_->Cancel(id)->state(), flame::v1::JOB_STATE_CANCELLING);
  EXPECT_EQ(*Heartbeat(id, 1), flame::v1::WORKER_ACTION_STOP);
  EXPECT_EQ(*Progress(id, 31, 4.0), flame::v1::WORKER_ACTION_STOP);
  EXPECT_EQ(manager_->Cancel(id)->state(), flame::v1::JOB_STATE_CANCELLING);  // idempotent
  FinishAll(id, flame::v1::FINISH_REASON_STOPPED);
  const flame::v1::Job job = Get(id);
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.attempts(0).outcome(), flame::v1::ATTEMPT_OUTCOME_CANCELLED);
  EXPECT_THAT(job.message(), HasSubstr("step 31"));
  EXPECT_TRUE(launcher_.signals.empty());  // they obeyed: nobody was killed
}

TEST_F(JobManagerRunTest, WorkersThatIgnoreACancelAreTerminatedAfterTheGracePeriod) {
  launcher_.obey_signals = false;
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  ASSERT_TRUE(manager_->Cancel(id).ok());
  clock_.AdvanceMs(29'000);
  ASSERT_TRUE(Heartbeat(id, 0).ok());
  manager_->Supervise();
  EXPECT_TRUE(launcher_.signals.empty());
  clock_.AdvanceMs(2'000);
  manager_->Supervise();
  EXPECT_THAT(launcher_.signals, ElementsAre(std::make_pair(PidOf(id, 0), SIGTERM)));
  clock_.AdvanceMs(10'001);
  manager_->Supervise();
  EXPECT_EQ(launcher_.signals.back(), std::make_pair(PidOf(id, 0), SIGKILL));
  launcher_.Exit(PidOf(id, 0), 128 + SIGKILL);
  manager_->Supervise();
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerRunTest, APausedJobResumesFromItsCheckpointInANewAttempt) {
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  ASSERT_TRUE(Progress(id, 20, 5.0).ok());
  ASSERT_EQ(manager_->Pause(id)->state(), flame::v1::JOB_STATE_PAUSING);
  EXPECT_EQ(*Heartbeat(id, 0), flame::v1::WORKER_ACTION_CHECKPOINT_STOP);
  ASSERT_TRUE(Checkpoint(id, 20).ok());
  FinishAll(id, flame::v1::FINISH_REASON_PAUSED);
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_PAUSED);

  absl::StatusOr<flame::v1::Job> resumed = manager_->Resume(id);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->state(), flame::v1::JOB_STATE_STARTING);
  EXPECT_EQ(resumed->attempts_size(), 2);
  JoinAll(id);
  ASSERT_TRUE(Progress(id, 30, 4.5, /*resumed_from=*/20).ok());
  const flame::v1::Job job = Get(id);
  EXPECT_EQ(job.attempts(1).start_step(), 20);
  EXPECT_EQ(job.checkpoints(0).step(), 20);
}

TEST_F(JobManagerRunTest, OnlyARunningJobCanBePaused) {
  const std::string running = Submit(Spec(2)).id();
  const std::string queued = Submit(Spec(1)).id();
  const absl::Status status = manager_->Pause(queued).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("QUEUED"));
  JoinAll(running);
  FinishAll(running, flame::v1::FINISH_REASON_COMPLETED);
  EXPECT_EQ(manager_->Resume(running).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->Cancel(running).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobManagerRunTest, ASilentRankEndsTheAttemptAfterTheHeartbeatTimeout) {
  const std::string id = Submit(Spec(2)).id();
  JoinAll(id);
  for (int i = 0; i < 4; ++i) {  // rank 0 keeps beating for two minutes, rank 1 never does
    clock_.AdvanceMs(30'000);
    ASSERT_TRUE(Heartbeat(id, 0).ok());
    manager_->Supervise();
    if (StateOf(id) != flame::v1::JOB_STATE_RUNNING) break;
  }
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Get(id).message(), HasSubstr("rank 1 sent no heartbeat for 60 s"));
}

TEST_F(JobManagerRunTest, HeartbeatsKeepARankAlive) {
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  for (int i = 0; i < 10; ++i) {
    clock_.AdvanceMs(30'000);
    ASSERT_TRUE(Heartbeat(id, 0).ok());
    manager_->Supervise();
  }
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_RUNNING);
}

TEST_F(JobManagerRunTest, TheCheckpointCatalogKeepsTheNewestK) {
  flame::v1::JobSpec spec = Spec(1);
  spec.mutable_checkpoint()->set_keep_latest_k(2);
  const std::string id = Submit(spec).id();
  JoinAll(id);
  for (int64_t step : {10, 30, 20}) ASSERT_TRUE(Checkpoint(id, step).ok());
  ASSERT_TRUE(Checkpoint(id, 30).ok());  // saved again after a restart: replaces, no duplicate
  const flame::v1::Job job = *store_.Stored(id);
  ASSERT_EQ(job.checkpoints_size(), 2);
  EXPECT_EQ(job.checkpoints(0).step(), 20);
  EXPECT_EQ(job.checkpoints(1).step(), 30);
  EXPECT_EQ(job.checkpoints(1).time_ms(), clock_.NowMs());
}

TEST_F(JobManagerRunTest, CallsFromUnknownJobsOrRanksAreRefused) {
  const std::string id = Submit(Spec(1)).id();
  flame::v1::JoinRequest join;
  *join.mutable_worker() = Worker(id, 5);
  EXPECT_EQ(manager_->Join(join).status().code(), absl::StatusCode::kInvalidArgument);
  join.mutable_worker()->set_job_id("j-nothere");
  EXPECT_EQ(manager_->Join(join).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerRunTest, ALaunchErrorFailsTheJobAndFreesItsSlots) {
  launcher_.launch_error = absl::NotFoundError("worker binary /x/flame-worker: not found");
  const flame::v1::Job job = Submit(Spec(2));
  EXPECT_EQ(job.state(), flame::v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.message(), HasSubstr("cannot start workers"));
  EXPECT_THAT(job.message(), HasSubstr("/x/flame-worker"));
  launcher_.launch_error = absl::OkStatus();
  EXPECT_EQ(Submit(Spec(2)).state(), flame::v1::JOB_STATE_STARTING);
}

TEST_F(JobManagerRunTest, ExitsAreRecordedEvenWhenTheStoreFailsAndWrittenLater) {
  const std::string id = Submit(Spec(1)).id();
  JoinAll(id);
  store_.fail = true;
  FinishAll(id, flame::v1::FINISH_REASON_COMPLETED);
  EXPECT_EQ(StateOf(id), flame::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(store_.Stored(id)->state(), flame::v1::JOB_STATE_RUNNING);
  store_.fail = false;
  manager_->Supervise();
  EXPECT_EQ(store_.Stored(id)->state(), flame::v1::JOB_STATE_SUCCEEDED);
}

TEST_F(JobManagerRunTest, WatchersSeeEveryPublishedChange) {
  const std::string id = Submit(Spec(1)).id();
  absl::StatusOr<JobManager::Snapshot> before = manager_->GetSnapshot(id);
  ASSERT_TRUE(before.ok());
  auto unchanged = manager_->AwaitChange(id, before->version, absl::Milliseconds(1));
  ASSERT_TRUE(unchanged.ok());
  EXPECT_FALSE(unchanged->has_value());
  ASSERT_TRUE(manager_->Cancel(id).ok());
  auto changed = manager_->AwaitChange(id, before->version, absl::Milliseconds(1));
  ASSERT_TRUE(changed.ok() && changed->has_value());
  EXPECT_EQ((*changed)->job.state(), flame::v1::JOB_STATE_CANCELLING);
  EXPECT_GT((*changed)->version, before->version);
  EXPECT_EQ(listener_.new_jobs, 1);
  EXPECT_GE(listener_.changes, 3);  // submitted, started, cancelling
}

TEST_F(JobManagerRunTest, AfterShutdownChangesAreRefusedAndWatchesEnd) {
  const std::string id = Submit(Spec(1)).id();
  manager_->Shutdown();
  EXPECT_EQ(manager_->Submit(Spec(1), "").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Heartbeat(id, 0).status().code(), absl::StatusCode::kUnavailable);
  auto watch = manager_->AwaitChange(id, 0, absl::Seconds(10));
  ASSERT_TRUE(watch.ok());
  EXPECT_FALSE(watch->has_value());
}

}  // namespace
}  // namespace flame::server::testing
