// JobManager: attempts. Launching the ranks of a placed job, watching their processes, the
// deadlines (heartbeats, stop requests, SIGTERM -> SIGKILL), turning exits into job states,
// and taking attempts up again after a flamed restart.
#include <signal.h>

#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/job_manager.h"
#include "server/job_state_machine.h"

namespace flame::server {

using flame::v1::Job;
using flame::v1::JobState;

namespace {

flame::v1::Attempt* CurrentAttempt(Job* job) {
  return job->attempts().empty() ? nullptr : &*job->mutable_attempts()->rbegin();
}

// Ranks of the current attempt whose processes have not been seen to exit.
std::vector<int> LiveRanks(const Job& job) {
  std::vector<int> live;
  if (job.attempts().empty()) return live;
  const flame::v1::Attempt& attempt = *job.attempts().rbegin();
  for (int i = 0; i < attempt.ranks_size(); ++i) {
    if (!attempt.ranks(i).exited()) live.push_back(i);
  }
  return live;
}

std::string Seconds(absl::Duration duration) {
  return absl::StrCat(absl::ToInt64Seconds(duration), " s");
}

// The job's message once an attempt has decided its next state.
std::string MessageFor(JobState next, const Job& job, const Verdict& verdict) {
  const int max_restarts = job.spec().resources().max_restarts();
  // Ranks that all report PAUSED when nobody asked lead to a failure; say why.
  const std::string why = verdict.outcome == flame::v1::ATTEMPT_OUTCOME_PAUSED
                              ? "the workers paused without a pause request"
                              : verdict.message;
  switch (next) {
    case JobState::JOB_STATE_SUCCEEDED:
      return absl::StrCat("completed at step ", job.progress().step());
    case JobState::JOB_STATE_PAUSED:
      return absl::StrCat("paused at step ", job.progress().step(),
                          "; resume continues from its newest checkpoint");
    case JobState::JOB_STATE_CANCELLED:
      if (verdict.outcome == flame::v1::ATTEMPT_OUTCOME_CANCELLED) {
        return absl::StrCat("cancelled at step ", job.progress().step());
      }
      return absl::StrCat("cancelled; the workers stopped abnormally: ", verdict.message);
    case JobState::JOB_STATE_RESTARTING:
      return absl::StrCat(why, "; restart ", job.restarts(), " of ", max_restarts);
    case JobState::JOB_STATE_FAILED:
      if (max_restarts > 0 && job.restarts() >= max_restarts) {
        return absl::StrCat(why, "; no restarts left (", max_restarts, " used)");
      }
      return why;
    default:
      return verdict.message;
  }
}

}  // namespace

void JobManager::Supervise() {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  for (auto& [sequence, entry] : by_sequence_) {
    if (entry->unsaved && store_->Put(entry->job).ok()) entry->unsaved = false;
    PollRanks(*entry);
    EnforceDeadlines(*entry);
    const std::string id = entry->job.id();  // a copy: LaunchAttempt replaces the record
    const bool idle = LiveRanks(entry->job).empty();
    if (idle && entry->job.state() == JobState::JOB_STATE_RESTARTING &&
        !coordinator_address_.empty()) {
      LaunchAttempt(*entry, scheduler_.SlotsOf(id));  // the next attempt, on the same slots
    } else if (idle && scheduler_.IsPlaced(id) && !HoldsResources(entry->job.state())) {
      scheduler_.Release(id);  // every process of its last attempt is gone
    }
  }
  StartPlacedJobs();
}

void JobManager::PollRanks(Entry& entry) {
  const std::vector<int> live = LiveRanks(entry.job);
  if (live.empty()) return;
  const flame::v1::Attempt& attempt = *entry.job.attempts().rbegin();
  std::optional<Job> job;  // copied on the first change
  for (int rank : live) {
    const ProcessState state =
        launcher_->Poll(attempt.ranks(rank).pid(), entry.job.id(), attempt.number());
    if (state.kind != ProcessState::Kind::kExited) continue;
    if (!job.has_value()) job = entry.job;
    ApplyRankExit(entry, &*job, rank, state.exit_code);
  }
  if (job.has_value()) Record(entry, std::move(*job));
}

void JobManager::ApplyRankExit(Entry& entry, Job* job, int rank, int exit_code) {
  flame::v1::Attempt* attempt = CurrentAttempt(job);
  flame::v1::RankProcess* process = attempt->mutable_ranks(rank);
  process->set_exited(true);
  process->set_exit_code(exit_code);
  FLAME_LOG(INFO) << "job " << job->id() << " attempt " << attempt->number() << " rank " << rank
                  << " (pid " << process->pid() << ") exited with code " << exit_code;
  if (attempt->outcome() == flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) {
    if (std::optional<Verdict> failure = RankFailure(*process)) {
      EndAttempt(entry, job, *failure);
    }
  }
  if (LiveRanks(*job).empty()) CloseAttempt(entry, job);
}

void JobManager::EndAttempt(Entry& entry, Job* job, const Verdict& verdict) {
  flame::v1::Attempt* attempt = CurrentAttempt(job);
  if (attempt == nullptr || attempt->outcome() != flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) return;
  attempt->set_outcome(verdict.outcome);
  attempt->set_message(verdict.message);
  entry.stop_deadline_ms = 0;

  const bool restart_allowed = job->restarts() < job->spec().resources().max_restarts();
  const JobState next = StateAfterAttempt(job->state(), verdict.outcome, restart_allowed);
  if (next != job->state()) {
    if (next == JobState::JOB_STATE_RESTARTING) job->set_restarts(job->restarts() + 1);
    const absl::Status status = SetState(job, next, MessageFor(next, *job, verdict));
    if (!status.ok()) {  // a bug
      FLAME_LOG(ERROR) << "job " << job->id() << ": " << status;
    }
  }
  Terminate(entry, *job);
}

void JobManager::CloseAttempt(Entry& entry, Job* job) {
  flame::v1::Attempt* attempt = CurrentAttempt(job);
  attempt->set_end_time_ms(clock_->NowMs());
  entry.kill_deadline_ms = 0;
  if (attempt->outcome() == flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) {
    EndAttempt(entry, job, JudgeCompletedAttempt(*attempt));
  }
}

void JobManager::Terminate(Entry& entry, const Job& job) {
  const std::vector<int> live = LiveRanks(job);
  if (live.empty()) return;
  const flame::v1::Attempt& attempt = *job.attempts().rbegin();
  for (int rank : live) {
    launcher_->Signal(attempt.ranks(rank).pid(), job.id(), attempt.number(), SIGTERM);
  }
  entry.kill_deadline_ms = clock_->NowMs() + absl::ToInt64Milliseconds(options_.kill_grace);
  FLAME_LOG(INFO) << "job " << job.id() << ": sent SIGTERM to " << live.size() << " ranks";
}

void JobManager::EnforceDeadlines(Entry& entry) {
  const std::vector<int> live = LiveRanks(entry.job);
  if (live.empty()) return;
  const int64_t now = clock_->NowMs();
  const flame::v1::Attempt& attempt = *entry.job.attempts().rbegin();
  if (entry.kill_deadline_ms != 0 && now >= entry.kill_deadline_ms) {
    FLAME_LOG(WARNING) << "job " << entry.job.id() << ": " << live.size()
                       << " ranks outlived SIGTERM; sending SIGKILL";
    for (int rank : live) {
      launcher_->Signal(attempt.ranks(rank).pid(), entry.job.id(), attempt.number(), SIGKILL);
    }
    entry.kill_deadline_ms = now + absl::ToInt64Milliseconds(options_.kill_grace);
    return;
  }
  if (attempt.outcome() != flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) return;  // already ending

  const int64_t timeout_ms = absl::ToInt64Milliseconds(options_.heartbeat_timeout);
  for (int rank : live) {
    if (rank >= static_cast<int>(entry.ranks.size())) continue;
    if (now - entry.ranks[rank].last_heartbeat_ms <= timeout_ms) continue;
    Job job = entry.job;
    EndAttempt(entry, &job,
               Verdict{flame::v1::ATTEMPT_OUTCOME_FAILED,
                       absl::StrCat("rank ", rank, " sent no heartbeat for ",
                                    Seconds(options_.heartbeat_timeout))});
    Record(entry, std::move(job));
    return;
  }
  if (entry.stop_deadline_ms != 0 && now >= entry.stop_deadline_ms) {
    entry.stop_deadline_ms = 0;
    Job job = entry.job;
    job.set_message("the workers did not stop in time; terminating them");
    Terminate(entry, job);
    Record(entry, std::move(job));
  }
}

void JobManager::StartPlacedJobs() {
  if (coordinator_address_.empty()) return;  // workers could not report; start none yet
  for (const Placement& placement : scheduler_.PlaceReady()) {
    Entry& entry = *jobs_.at(placement.job_id);
    if (entry.job.state() != JobState::JOB_STATE_QUEUED) {  // cannot happen; never strand slots
      FLAME_LOG(ERROR) << "job " << placement.job_id << " was placed while "
                       << StateName(entry.job.state());
      scheduler_.Release(placement.job_id);
      continue;
    }
    LaunchAttempt(entry, placement.slots);
  }
}

void JobManager::LaunchAttempt(Entry& entry, const std::vector<int>& slots) {
  Job job = entry.job;
  const int number = job.attempts().empty() ? 1 : job.attempts().rbegin()->number() + 1;
  LaunchRequest request;
  request.job_id = job.id();
  request.attempt = number;
  request.coordinator_address = coordinator_address_;
  request.auth_token = options_.worker_token;
  request.gpu_slots = pool_.kind == SlotKind::kGpu;
  request.hide_gpus = request.gpu_slots && job.spec().resources().device() == "cpu";
  request.slots = slots;
  request.log_dir = (std::filesystem::path(job.job_dir()) / "logs").string();

  flame::v1::Attempt* attempt = job.add_attempts();
  attempt->set_number(number);
  attempt->set_start_time_ms(clock_->NowMs());
  absl::StatusOr<LaunchResult> launched =
      slots.size() == static_cast<size_t>(job.spec().resources().ranks())
          ? launcher_->Launch(request)
          : absl::InternalError(absl::StrCat("job holds ", slots.size(), " slots for ",
                                             job.spec().resources().ranks(), " ranks"));
  if (!launched.ok()) {
    // A launch error (missing binary, unwritable log folder) would repeat on every restart.
    const std::string message = absl::StrCat("cannot start workers: ", launched.status().message());
    attempt->set_outcome(flame::v1::ATTEMPT_OUTCOME_FAILED);
    attempt->set_message(message);
    attempt->set_end_time_ms(clock_->NowMs());
    if (job.state() == JobState::JOB_STATE_QUEUED) {
      (void)SetState(&job, JobState::JOB_STATE_STARTING, "starting");
    }
    const absl::Status status = SetState(&job, JobState::JOB_STATE_FAILED, message);
    if (!status.ok()) {
      FLAME_LOG(ERROR) << "job " << job.id() << ": " << status;
    }
    scheduler_.Release(job.id());
    Record(entry, std::move(job));
    return;
  }
  for (const LaunchedRank& rank : launched->ranks) {
    flame::v1::RankProcess* process = attempt->add_ranks();
    process->set_rank(rank.rank);
    process->set_pid(rank.pid);
    process->set_log_path(rank.log_path);
    process->set_slot(slots[rank.rank]);
  }
  attempt->set_master_addr(launched->master_addr);
  attempt->set_master_port(launched->master_port);
  const absl::Status status =
      SetState(&job, JobState::JOB_STATE_STARTING,
               absl::StrCat("attempt ", number, ": started ", slots.size(), " workers"));
  if (!status.ok()) {
    FLAME_LOG(ERROR) << "job " << job.id() << ": " << status;
  }
  entry.ranks.assign(slots.size(), RankRuntime{false, clock_->NowMs()});
  entry.stop_deadline_ms = 0;
  entry.kill_deadline_ms = 0;
  Record(entry, std::move(job));
}

void JobManager::RecoverAttempt(Entry& entry) {
  const Job& job = entry.job;
  const std::vector<int> live = LiveRanks(job);
  if (!job.attempts().empty() && live.empty() && HoldsResources(job.state()) &&
      job.attempts().rbegin()->outcome() == flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) {
    // Every rank was seen to exit but the verdict was not stored (it is normally written in
    // the same record): reach it now from the same facts.
    Job closed = entry.job;
    CloseAttempt(entry, &closed);
    Record(entry, std::move(closed));
  }
  if (live.empty() && job.state() != JobState::JOB_STATE_RESTARTING) return;
  if (job.attempts().empty()) {
    FLAME_LOG(ERROR) << "job " << job.id() << " is " << StateName(job.state())
                     << " but has no attempt; leaving it as it is";
    return;
  }
  const flame::v1::Attempt& attempt = *job.attempts().rbegin();
  std::vector<int> slots;
  for (const flame::v1::RankProcess& rank : attempt.ranks()) slots.push_back(rank.slot());
  scheduler_.Adopt(job.id(), slots);
  // Workers that are alive get a full heartbeat timeout to find the new flamed; the next
  // Supervise() polls every pid and ends the attempt if any is gone.
  entry.ranks.assign(attempt.ranks_size(), RankRuntime{false, clock_->NowMs()});
  if (job.state() == JobState::JOB_STATE_CANCELLING) {
    entry.stop_deadline_ms = clock_->NowMs() + absl::ToInt64Milliseconds(options_.stop_grace);
  } else if (job.state() == JobState::JOB_STATE_PAUSING) {
    entry.stop_deadline_ms = clock_->NowMs() + absl::ToInt64Milliseconds(options_.pause_grace);
  }
  if (attempt.outcome() != flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) {
    Terminate(entry, job);  // a teardown was under way when flamed stopped
  }
  FLAME_LOG(INFO) << "job " << job.id() << " (" << StateName(job.state()) << "): watching "
                  << live.size() << " ranks of attempt " << attempt.number();
}

}  // namespace flame::server
