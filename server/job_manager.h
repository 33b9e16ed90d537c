// JobManager: the domain logic of flamed. It owns every job in memory (under one mutex), writes
// every change to the JobStore before the call that made it returns, tells watchers and the
// metrics about each change, and drives attempts: placement (Scheduler), launch and teardown
// (Launcher), and the verdict on how an attempt ended (attempt_outcome.h).
//
// Three kinds of callers:
// - users, through CoordinatorService: Submit, Get, List, Cancel, Pause, Resume, Watch;
// - worker ranks, through WorkerService: Join, Heartbeat, ReportProgress, CommitCheckpoint,
//   Finish. Each names (job, attempt, rank); a call from an attempt that is not the job's
//   current, live one gets FAILED_PRECONDITION, and the worker exits;
// - the Supervisor thread, which calls Supervise() a few times a second: it reaps exited
//   ranks, enforces heartbeat and stop deadlines, relaunches restarting jobs and starts queued
//   ones.
//
// Runtime facts that a flamed restart may lose (which ranks joined, when each last sent a
// heartbeat) live beside the record, not in it; Recover() rebuilds them conservatively.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "flame/v1/job.pb.h"
#include "flame/v1/job_spec.pb.h"
#include "flame/v1/worker.pb.h"
#include "server/attempt_outcome.h"
#include "server/job_history.h"
#include "server/job_listener.h"
#include "server/job_store.h"
#include "server/launcher.h"
#include "server/scheduler.h"

namespace flame::server {

struct JobManagerOptions {
  std::string data_dir;  // absolute; job i lives in <data_dir>/jobs/<i>
  // What workers dial (FLAME_COORDINATOR). May be left empty and set later with
  // SetCoordinatorAddress (once the gRPC port is bound); no worker starts before it is known.
  std::string coordinator_address;
  // Handed to workers as FLAME_TOKEN when flamed requires a bearer token (empty: none).
  std::string worker_token;
  // An attempt ends when a live rank sends no heartbeat for this long.
  absl::Duration heartbeat_timeout = absl::Seconds(60);
  // After a cancel, workers get this long to obey STOP before they are terminated.
  absl::Duration stop_grace = absl::Seconds(30);
  // After a pause, workers get this long to save their checkpoint and exit.
  absl::Duration pause_grace = absl::Minutes(10);
  // Between SIGTERM and SIGKILL when a mesh is torn down.
  absl::Duration kill_grace = absl::Seconds(10);
  size_t history_capacity = kDefaultHistoryCapacity;
};

class JobManager {
 public:
  // `store`, `launcher`, `clock` and `listener` (may be null) must outlive the manager.
  JobManager(JobManagerOptions options, SlotPool pool, JobStore* store, Launcher* launcher,
             const Clock* clock, JobListener* listener);
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Loads every stored job, unchanged, and takes up supervision: queued jobs are queued again,
  // jobs with workers keep their slots and are polled, so that the next Supervise() reattaches
  // to live workers and ends the attempts whose workers are gone. Call once, first.
  absl::Status Recover();

  // ---- Users ----

  // Resolves defaults, validates (INVALID_ARGUMENT naming the key; nothing is stored), checks
  // that the job can ever fit on this host, stores it and queues it. A repeated non-empty
  // idempotency key returns the job it created the first time.
  absl::StatusOr<flame::v1::Job> Submit(flame::v1::JobSpec spec,
                                        const std::string& idempotency_key);
  absl::StatusOr<flame::v1::Job> Get(const std::string& job_id) const;
  // In submission order; an empty filter means every state.
  std::vector<flame::v1::Job> List(const std::vector<flame::v1::JobState>& states) const;
  // A queued job is cancelled at once; a running one is asked to stop (directive STOP) and is
  // terminated when it has not stopped within stop_grace. Cancelling a cancelled job is a no-op.
  absl::StatusOr<flame::v1::Job> Cancel(const std::string& job_id);
  // Asks a running job to save a checkpoint and stop (directive CHECKPOINT_STOP).
  absl::StatusOr<flame::v1::Job> Pause(const std::string& job_id);
  // Queues a cancelled, paused or failed job again, with a fresh restart budget; its workers
  // continue from the newest checkpoint. Refused while the last attempt's workers still exit.
  absl::StatusOr<flame::v1::Job> Resume(const std::string& job_id);

  // A job and its version, which grows with every published change.
  struct Snapshot {
    flame::v1::Job job;
    uint64_t version = 0;
  };
  absl::StatusOr<Snapshot> GetSnapshot(const std::string& job_id) const;
  // Waits until the job's version exceeds `version` (returns the new snapshot), `timeout`
  // passes or the manager shuts down (both return nullopt).
  absl::StatusOr<std::optional<Snapshot>> AwaitChange(const std::string& job_id, uint64_t version,
                                                      absl::Duration timeout);

  // ---- Worker ranks ----

  absl::StatusOr<flame::v1::JoinResponse> Join(const flame::v1::JoinRequest& request);
  absl::StatusOr<flame::v1::WorkerAction> Heartbeat(const flame::v1::HeartbeatRequest& request);
  absl::StatusOr<flame::v1::WorkerAction> ReportProgress(const flame::v1::ProgressReport& report);
  absl::StatusOr<flame::v1::WorkerAction> CommitCheckpoint(
      const flame::v1::CheckpointCommit& commit);
  absl::Status Finish(const flame::v1::FinishRequest& request);

  // ---- Supervision ----

  // One pass: reap ranks, enforce deadlines, relaunch, place and start queued jobs, and retry
  // writes that failed during earlier passes.
  void Supervise();

  // The gRPC address workers must dial, known once the server has bound its port.
  void SetCoordinatorAddress(const std::string& address);

  // Ends every watch and refuses further changes. Workers are left running.
  void Shutdown();
  bool shutting_down() const;

  const SlotPool& pool() const { return pool_; }

 private:
  // What flamed knows about a rank of the current attempt beyond the stored record.
  struct RankRuntime {
    bool joined = false;
    int64_t last_heartbeat_ms = 0;
  };

  struct Entry {
    flame::v1::Job job;
    uint64_t version = 1;
    bool unsaved = false;  // memory is ahead of the store (a write failed during supervision)
    std::vector<RankRuntime> ranks;  // of the current attempt
    int64_t stop_deadline_ms = 0;    // a STOP/CHECKPOINT_STOP expires: terminate (0: none)
    int64_t kill_deadline_ms = 0;    // SIGTERM was sent: SIGKILL at this time (0: none)
  };

  // ---- job_manager.cc: records ----
  absl::StatusOr<Entry*> Find(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `job` to the store and, only if that worked, makes it the entry's record and
  // publishes it. For changes a caller is waiting on: an error reaches the caller.
  absl::Status Save(Entry& entry, flame::v1::Job job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For changes that have already happened in the world (a process exited): the record
  // follows the world even when the write fails, and the write is retried by Supervise().
  void Record(Entry& entry, flame::v1::Job job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Publish(Entry& entry, flame::v1::Job job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves `job` to `to` (checked by the state machine), stamping times and the message.
  absl::Status SetState(flame::v1::Job* job, flame::v1::JobState to, std::string message) const;
  std::string NewJobId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ResolveSpec(const std::string& job_id, flame::v1::JobSpec* spec) const;
  absl::Status CheckMutable() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // ---- job_manager_workers.cc: worker calls ----
  // The entry when `worker` names the job's current, live attempt and a valid rank.
  absl::StatusOr<Entry*> FindAttempt(const flame::v1::WorkerIdentity& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes that a rank is alive and has joined (any call from it proves both). True when the
  // job is STARTING and every rank has now joined: it should become RUNNING.
  bool NoteAlive(Entry& entry, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static flame::v1::WorkerAction DirectiveFor(flame::v1::JobState state);

  // ---- job_manager_supervision.cc: attempts ----
  void PollRanks(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnforceDeadlines(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPlacedJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Launches a new attempt of `entry` on `slots` (the job holds them already) and records it.
  void LaunchAttempt(Entry& entry, const std::vector<int>& slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a rank's exit to `job`, ending the attempt when it failed or was the last rank.
  void ApplyRankExit(Entry& entry, flame::v1::Job* job, int rank, int exit_code)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the outcome of the current attempt of `job` (once: later verdicts are ignored), moves
  // the job to the state that follows, and tears down the ranks that still run.
  void EndAttempt(Entry& entry, flame::v1::Job* job, const Verdict& verdict)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Called when every rank of the current attempt has exited: stamps the end and, unless a
  // failure already decided it, judges the attempt from its ranks' Finish reports.
  void CloseAttempt(Entry& entry, flame::v1::Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SIGTERM to every live rank now, SIGKILL after kill_grace.
  void Terminate(Entry& entry, const flame::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adopts slots and rebuilds the runtime of a job that had workers when flamed stopped.
  void RecoverAttempt(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobManagerOptions options_;
  const SlotPool pool_;
  JobStore* const store_;
  Launcher* const launcher_;
  const Clock* const clock_;
  JobListener* const listener_;

  mutable absl::Mutex mu_;
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  // Entries never move or go away once created, so pointers to them stay valid.
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Entry*> by_sequence_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> by_idempotency_key_ ABSL_GUARDED_BY(mu_);
  std::string coordinator_address_ ABSL_GUARDED_BY(mu_);
  int64_t last_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::BitGen random_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flame::server
