// JobManager: the calls worker ranks make (WorkerService).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/job_manager.h"
#include "server/job_state_machine.h"

namespace flame::server {

using flame::v1::Job;
using flame::v1::JobState;
using flame::v1::WorkerAction;

absl::StatusOr<JobManager::Entry*> JobManager::FindAttempt(
    const flame::v1::WorkerIdentity& worker) {
  FLAME_RETURN_IF_ERROR(CheckMutable());  // UNAVAILABLE: the worker keeps its report and retries
  FLAME_ASSIGN_OR_RETURN(Entry * entry, Find(worker.job_id()));
  const Job& job = entry->job;
  const int current = job.attempts().empty() ? 0 : job.attempts().rbegin()->number();
  if (worker.attempt() != current) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", worker.attempt(), " of job ",
                                                      job.id(),
                                                      " is not current (current: ", current, ")"));
  }
  const flame::v1::Attempt& attempt = *job.attempts().rbegin();
  if (attempt.outcome() != flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) {
    return absl::FailedPreconditionError(
        absl::StrCat("attempt ", current, " of job ", job.id(), " has ended (",
                     OutcomeName(attempt.outcome()), ": ", attempt.message(), ")"));
  }
  switch (job.state()) {
    case JobState::JOB_STATE_STARTING:
    case JobState::JOB_STATE_RUNNING:
    case JobState::JOB_STATE_PAUSING:
    case JobState::JOB_STATE_CANCELLING:
      break;
    default:
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.id(), " is ", StateName(job.state()), "; its workers must stop"));
  }
  if (worker.rank() < 0 || worker.rank() >= attempt.ranks_size() ||
      worker.rank() >= static_cast<int>(entry->ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", worker.rank(), " is not in job ",
                                                   job.id(), " (world size ", attempt.ranks_size(),
                                                   ")"));
  }
  return entry;
}

bool JobManager::NoteAlive(Entry& entry, int rank) {
  RankRuntime& runtime = entry.ranks[rank];
  runtime.joined = true;
  runtime.last_heartbeat_ms = clock_->NowMs();
  if (entry.job.state() != JobState::JOB_STATE_STARTING) return false;
  return std::all_of(entry.ranks.begin(), entry.ranks.end(),
                     [](const RankRuntime& r) { return r.joined; });
}

WorkerAction JobManager::DirectiveFor(JobState state) {
  switch (state) {
    case JobState::JOB_STATE_CANCELLING:
      return flame::v1::WORKER_ACTION_STOP;
    case JobState::JOB_STATE_PAUSING:
      return flame::v1::WORKER_ACTION_CHECKPOINT_STOP;
    default:
      return flame::v1::WORKER_ACTION_CONTINUE;
  }
}

absl::StatusOr<flame::v1::JoinResponse> JobManager::Join(const flame::v1::JoinRequest& request) {
  absl::MutexLock lock(&mu_);
  FLAME_ASSIGN_OR_RETURN(Entry * entry, FindAttempt(request.worker()));
  const int rank = request.worker().rank();
  const int64_t launched_pid = entry->job.attempts().rbegin()->ranks(rank).pid();
  if (request.pid() != 0 && request.pid() != launched_pid) {
    // Not fatal (a wrapper script may exec the worker in a child), but worth knowing.
    FLAME_LOG(WARNING) << "job " << entry->job.id() << " rank " << rank << " joined from pid "
                       << request.pid() << ", launched as pid " << launched_pid;
  }
  if (NoteAlive(*entry, rank)) {
    Job job = entry->job;
    FLAME_RETURN_IF_ERROR(SetState(&job, JobState::JOB_STATE_RUNNING,
                                   absl::StrCat("all ", entry->ranks.size(), " ranks joined")));
    FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
  }
  flame::v1::JoinResponse response;
  *response.mutable_spec() = entry->job.spec();
  response.set_world_size(entry->job.attempts().rbegin()->ranks_size());
  response.set_dump_folder(entry->job.spec().job().dump_folder());
  return response;
}

absl::StatusOr<WorkerAction> JobManager::Heartbeat(const flame::v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  FLAME_ASSIGN_OR_RETURN(Entry * entry, FindAttempt(request.worker()));
  if (NoteAlive(*entry, request.worker().rank())) {
    // A restarted flamed learns of joins from heartbeats: the Join calls went to its
    // predecessor.
    Job job = entry->job;
    FLAME_RETURN_IF_ERROR(SetState(&job, JobState::JOB_STATE_RUNNING, "all ranks are alive"));
    FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
  }
  return DirectiveFor(entry->job.state());
}

absl::StatusOr<WorkerAction> JobManager::ReportProgress(const flame::v1::ProgressReport& report) {
  absl::MutexLock lock(&mu_);
  FLAME_ASSIGN_OR_RETURN(Entry * entry, FindAttempt(report.worker()));
  Job job = entry->job;
  if (NoteAlive(*entry, report.worker().rank())) {
    FLAME_RETURN_IF_ERROR(SetState(&job, JobState::JOB_STATE_RUNNING, "all ranks are alive"));
  }
  flame::v1::Progress progress = report.progress();
  progress.set_update_time_ms(clock_->NowMs());
  if (progress.total_steps() == 0) progress.set_total_steps(job.spec().training().steps());
  *job.mutable_progress() = progress;
  job.mutable_attempts()->rbegin()->set_start_step(report.resumed_from_step());
  AppendHistoryPoint(job.mutable_history(), HistoryPointFromProgress(progress),
                     options_.history_capacity);
  FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
  return DirectiveFor(entry->job.state());
}

absl::StatusOr<WorkerAction> JobManager::CommitCheckpoint(
    const flame::v1::CheckpointCommit& commit) {
  absl::MutexLock lock(&mu_);
  FLAME_ASSIGN_OR_RETURN(Entry * entry, FindAttempt(commit.worker()));
  if (commit.checkpoint().step() < 0 || commit.checkpoint().path().empty()) {
    return absl::InvalidArgumentError("a checkpoint needs a step >= 0 and a path");
  }
  Job job = entry->job;
  if (NoteAlive(*entry, commit.worker().rank())) {
    FLAME_RETURN_IF_ERROR(SetState(&job, JobState::JOB_STATE_RUNNING, "all ranks are alive"));
  }
  flame::v1::CheckpointRecord record = commit.checkpoint();
  if (record.time_ms() == 0) record.set_time_ms(clock_->NowMs());
  // The catalog stays sorted by step; a step saved again (after a restart) replaces its entry.
  auto* catalog = job.mutable_checkpoints();
  auto same_or_later = std::find_if(catalog->begin(), catalog->end(),
                                    [&](const auto& c) { return c.step() >= record.step(); });
  if (same_or_later != catalog->end() && same_or_later->step() == record.step()) {
    *same_or_later = record;
  } else {
    *catalog->Add() = record;
    std::sort(catalog->begin(), catalog->end(),
              [](const auto& a, const auto& b) { return a.step() < b.step(); });
  }
  // The worker deletes all but the newest keep_latest_k; the catalog mirrors what is on disk.
  const int64_t keep = job.spec().checkpoint().keep_latest_k();
  if (keep > 0 && catalog->size() > keep) {
    catalog->DeleteSubrange(0, catalog->size() - static_cast<int>(keep));
  }
  FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
  return DirectiveFor(entry->job.state());
}

absl::Status JobManager::Finish(const flame::v1::FinishRequest& request) {
  absl::MutexLock lock(&mu_);
  FLAME_ASSIGN_OR_RETURN(Entry * entry, FindAttempt(request.worker()));
  const int rank = request.worker().rank();
  Job job = entry->job;
  if (NoteAlive(*entry, rank)) {
    FLAME_RETURN_IF_ERROR(SetState(&job, JobState::JOB_STATE_RUNNING, "all ranks are alive"));
  }
  flame::v1::RankProcess* process = job.mutable_attempts()->rbegin()->mutable_ranks(rank);
  process->set_finish_outcome(OutcomeOfFinishReason(request.reason()));
  if (request.reason() == flame::v1::FINISH_REASON_COMPLETED &&
      request.step() > job.progress().step()) {
    job.mutable_progress()->set_step(request.step());
  }
  if (process->finish_outcome() == flame::v1::ATTEMPT_OUTCOME_FAILED) {
    // One rank's error ends the whole mesh: the others would wait on it in a collective.
    EndAttempt(*entry, &job,
               Verdict{flame::v1::ATTEMPT_OUTCOME_FAILED,
                       absl::StrCat("rank ", rank, " reported an error: ", request.message())});
  }
  // The worker exits right after this answer, so its report must not be lost to a failed
  // write: Record keeps it in memory and retries the write.
  Record(*entry, std::move(job));
  return absl::OkStatus();
}

}  // namespace flame::server
