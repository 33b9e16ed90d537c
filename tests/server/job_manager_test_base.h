// A JobManager on an in-memory store, a fake launcher and a fake clock, with helpers that act
// as the worker ranks of a job. Shared by the JobManager test files.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/job_listener.h"
#include "server/job_manager.h"
#include "tests/server/test_util.h"

namespace flame::server::testing {

// Counts the changes a JobManager publishes.
class CountingListener final : public JobListener {
 public:
  void OnJobChanged(const flame::v1::Job* before, const flame::v1::Job& after) override {
    ++changes;
    if (before == nullptr) ++new_jobs;
  }
  int changes = 0;
  int new_jobs = 0;
};

class JobManagerTest : public ::testing::Test {
 protected:
  // (Re)creates the manager on the same store and launcher, as a restarted flamed would.
  void StartManager(SlotPool pool = SlotPool{SlotKind::kCpu, 4}) {
    manager_.reset();
    JobManagerOptions options;
    options.data_dir = dir_.path();
    options.coordinator_address = "127.0.0.1:7470";
    options.heartbeat_timeout = absl::Seconds(60);
    options.stop_grace = absl::Seconds(30);
    options.pause_grace = absl::Seconds(120);
    options.kill_grace = absl::Seconds(10);
    manager_ =
        std::make_unique<JobManager>(options, pool, &store_, &launcher_, &clock_, &listener_);
    ASSERT_TRUE(manager_->Recover().ok());
  }

  flame::v1::JobSpec Spec(int ranks = 1) { return ValidSpec(dir_.path(), ranks); }

  flame::v1::Job Submit(flame::v1::JobSpec spec) {
    absl::StatusOr<flame::v1::Job> job = manager_->Submit(std::move(spec), "");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : flame::v1::Job();
  }

  flame::v1::Job Get(const std::string& id) {
    absl::StatusOr<flame::v1::Job> job = manager_->Get(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : flame::v1::Job();
  }

  flame::v1::JobState StateOf(const std::string& id) { return Get(id).state(); }

  static int CurrentAttempt(const flame::v1::Job& job) {
    return job.attempts().empty() ? 0 : job.attempts().rbegin()->number();
  }

  flame::v1::WorkerIdentity Worker(const std::string& id, int rank, int attempt = 0) {
    flame::v1::WorkerIdentity worker;
    worker.set_job_id(id);
    worker.set_attempt(attempt != 0 ? attempt : CurrentAttempt(Get(id)));
    worker.set_rank(rank);
    return worker;
  }

  int64_t PidOf(const std::string& id, int rank) {
    return Get(id).attempts().rbegin()->ranks(rank).pid();
  }

  void JoinAll(const std::string& id) {
    const int ranks = Get(id).spec().resources().ranks();
    for (int rank = 0; rank < ranks; ++rank) {
      flame::v1::JoinRequest request;
      *request.mutable_worker() = Worker(id, rank);
      ASSERT_TRUE(manager_->Join(request).ok());
    }
  }

  absl::StatusOr<flame::v1::WorkerAction> Heartbeat(const std::string& id, int rank) {
    flame::v1::HeartbeatRequest request;
    *request.mutable_worker() = Worker(id, rank);
    return manager_->Heartbeat(request);
  }

  absl::StatusOr<flame::v1::WorkerAction> Progress(const std::string& id, int64_t step, double loss,
                                                   int64_t resumed_from = 0) {
    flame::v1::ProgressReport report;
    *report.mutable_worker() = Worker(id, 0);
    report.mutable_progress()->set_step(step);
    report.mutable_progress()->set_loss(loss);
    report.set_resumed_from_step(resumed_from);
    return manager_->ReportProgress(report);
  }

  absl::StatusOr<flame::v1::WorkerAction> Checkpoint(const std::string& id, int64_t step) {
    flame::v1::CheckpointCommit commit;
    *commit.mutable_worker() = Worker(id, 0);
    commit.mutable_checkpoint()->set_step(step);
    commit.mutable_checkpoint()->set_path(absl::StrCat("/ckpt/step-", step));
    return manager_->CommitCheckpoint(commit);
  }

  // Every rank reports `reason` and exits with `code`, and one supervision pass sees it.
  void FinishAll(const std::string& id, flame::v1::FinishReason reason, int code = 0) {
    const flame::v1::Job job = Get(id);
    for (const flame::v1::RankProcess& rank : job.attempts().rbegin()->ranks()) {
      flame::v1::FinishRequest request;
      *request.mutable_worker() = Worker(id, rank.rank());
      request.set_reason(reason);
      request.set_step(job.progress().step());
      ASSERT_TRUE(manager_->Finish(request).ok());
      launcher_.Exit(rank.pid(), code);
    }
    manager_->Supervise();
  }

  TempDir dir_;
  MemoryJobStore store_;
  FakeLauncher launcher_;
  FakeClock clock_;
  CountingListener listener_;
  std::unique_ptr<JobManager> manager_;
};

}  // namespace flame::server::testing
