// JobManager: records, publication, and the user-facing calls. Worker calls are in
// job_manager_workers.cc, attempt supervision in job_manager_supervision.cc.
#include "server/job_manager.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/job_state_machine.h"

namespace flame::server {

using flame::v1::Job;
using flame::v1::JobSpec;
using flame::v1::JobState;

JobManager::JobManager(JobManagerOptions options, SlotPool pool, JobStore* store,
                       Launcher* launcher, const Clock* clock, JobListener* listener)
    : options_(std::move(options)),
      pool_(pool),
      store_(store),
      launcher_(launcher),
      clock_(clock),
      listener_(listener),
      scheduler_(pool),
      coordinator_address_(options_.coordinator_address) {}

absl::Status JobManager::Recover() {
  FLAME_ASSIGN_OR_RETURN(StoredJobs stored, store_->LoadAll());
  absl::MutexLock lock(&mu_);
  last_sequence_ = stored.last_sequence;
  for (Job& job : stored.jobs) {
    if (jobs_.contains(job.id())) {
      return absl::DataLossError(absl::StrCat("job store holds job ", job.id(), " twice"));
    }
    auto owned = std::make_unique<Entry>();
    Entry& entry = *owned;
    entry.job = std::move(job);
    jobs_[entry.job.id()] = std::move(owned);
    by_sequence_[entry.job.sequence()] = &entry;
    if (!entry.job.idempotency_key().empty()) {
      by_idempotency_key_[entry.job.idempotency_key()] = entry.job.id();
    }
    if (listener_ != nullptr) listener_->OnJobChanged(nullptr, entry.job);

    if (entry.job.state() == JobState::JOB_STATE_QUEUED) {
      const int ranks = entry.job.spec().resources().ranks();
      FLAME_RETURN_IF_ERROR(scheduler_.Enqueue(entry.job.id(), entry.job.sequence(), ranks));
      if (absl::Status fits = scheduler_.CheckFits(ranks); !fits.ok()) {
        // Queued when the host offered more slots; it waits, visibly, until a user cancels it.
        FLAME_LOG(WARNING) << "job " << entry.job.id() << " can no longer run here: " << fits;
        Job job = entry.job;
        job.set_message(absl::StrCat("cannot start: ", fits.message()));
        Record(entry, std::move(job));
      }
    } else {
      RecoverAttempt(entry);
    }
  }
  FLAME_LOG(INFO) << "loaded " << jobs_.size() << " jobs from the job store";
  return absl::OkStatus();
}

// ---- Records ----

absl::StatusOr<JobManager::Entry*> JobManager::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return it->second.get();
}

absl::Status JobManager::Save(Entry& entry, Job job) {
  job.set_update_time_ms(clock_->NowMs());
  FLAME_RETURN_IF_ERROR(store_->Put(job));
  entry.unsaved = false;
  Publish(entry, std::move(job));
  return absl::OkStatus();
}

void JobManager::Record(Entry& entry, Job job) {
  job.set_update_time_ms(clock_->NowMs());
  absl::Status status = store_->Put(job);
  if (!status.ok()) {
    FLAME_LOG(ERROR) << "job " << job.id() << ": cannot store a change, will retry: " << status;
  }
  entry.unsaved = !status.ok();
  Publish(entry, std::move(job));
}

void JobManager::Publish(Entry& entry, Job job) {
  // Version 0 marks an entry whose first record this is.
  if (listener_ != nullptr) listener_->OnJobChanged(entry.version == 0 ? nullptr : &entry.job, job);
  entry.job = std::move(job);
  ++entry.version;  // wakes AwaitChange callers: their condition reads the version
}

absl::Status JobManager::SetState(Job* job, JobState to, std::string message) const {
  FLAME_RETURN_IF_ERROR(CheckTransition(job->state(), to));
  FLAME_LOG(INFO) << "job " << job->id() << ": " << StateName(job->state()) << " -> "
                  << StateName(to) << " (" << message << ")";
  job->set_state(to);
  job->set_message(std::move(message));
  job->set_end_time_ms(IsSettled(to) ? clock_->NowMs() : 0);
  return absl::OkStatus();
}

std::string JobManager::NewJobId() {
  // 32 random bits: short enough to type, and a collision is simply drawn again.
  while (true) {
    std::string id = absl::StrFormat("j-%08x", absl::Uniform<uint32_t>(random_));
    if (!jobs_.contains(id)) return id;
  }
}

absl::Status JobManager::CheckMutable() const {
  if (shutting_down_) return absl::UnavailableError("flamed is shutting down");
  return absl::OkStatus();
}

// Defaults, validation, and the fields only flamed can fill: the dump folder.
absl::Status JobManager::ResolveSpec(const std::string& job_id, JobSpec* spec) const {
  ApplyJobSpecDefaults(spec);
  FLAME_RETURN_IF_ERROR(ValidateJobSpec(*spec));
  FLAME_RETURN_IF_ERROR(scheduler_.CheckFits(spec->resources().ranks()));
  if (spec->resources().device() == "cuda" && pool_.kind != SlotKind::kGpu) {
    return absl::InvalidArgumentError(
        "resources.device is \"cuda\", but this host has no GPUs (flamed --gpus)");
  }
  // The dump folder is the job's output root; relative paths are taken inside the job's
  // directory, since flamed's working directory means nothing to the user.
  const std::filesystem::path job_dir = std::filesystem::path(options_.data_dir) / "jobs" / job_id;
  std::filesystem::path dump = spec->job().has_dump_folder()
                                   ? std::filesystem::path(spec->job().dump_folder())
                                   : std::filesystem::path("dump");
  if (dump.empty()) return absl::InvalidArgumentError("job.dump_folder must not be empty");
  if (dump.is_relative()) dump = job_dir / dump;
  spec->mutable_job()->set_dump_folder(dump.lexically_normal().string());
  return absl::OkStatus();
}

// ---- Users ----

absl::StatusOr<Job> JobManager::Submit(JobSpec spec, const std::string& idempotency_key) {
  absl::MutexLock lock(&mu_);
  FLAME_RETURN_IF_ERROR(CheckMutable());
  if (!idempotency_key.empty()) {
    auto it = by_idempotency_key_.find(idempotency_key);
    if (it != by_idempotency_key_.end()) return jobs_.at(it->second)->job;
  }
  const std::string id = NewJobId();
  FLAME_RETURN_IF_ERROR(ResolveSpec(id, &spec));

  Job job;
  job.set_id(id);
  job.set_name(spec.name());
  job.set_spec_hash(JobSpecHash(spec));
  *job.mutable_spec() = std::move(spec);
  job.set_state(JobState::JOB_STATE_QUEUED);
  job.set_message("waiting for slots");
  job.set_create_time_ms(clock_->NowMs());
  job.set_job_dir((std::filesystem::path(options_.data_dir) / "jobs" / id).string());
  job.set_idempotency_key(idempotency_key);
  job.set_sequence(last_sequence_ + 1);
  job.mutable_progress()->set_total_steps(job.spec().training().steps());

  auto owned = std::make_unique<Entry>();
  Entry& entry = *owned;
  entry.version = 0;
  // Stored first: a job exists only once it is durable.
  FLAME_RETURN_IF_ERROR(Save(entry, std::move(job)));
  last_sequence_ = entry.job.sequence();
  jobs_[id] = std::move(owned);
  by_sequence_[entry.job.sequence()] = &entry;
  if (!idempotency_key.empty()) by_idempotency_key_[idempotency_key] = id;
  FLAME_LOG(INFO) << "job " << id << " submitted (" << entry.job.spec().resources().ranks()
                  << " ranks)";
  FLAME_RETURN_IF_ERROR(
      scheduler_.Enqueue(id, entry.job.sequence(), entry.job.spec().resources().ranks()));
  StartPlacedJobs();
  return entry.job;
}

absl::StatusOr<Job> JobManager::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  FLAME_ASSIGN_OR_RETURN(Entry * entry, Find(job_id));
  return entry->job;
}

std::vector<Job> JobManager::List(const std::vector<JobState>& states) const {
  absl::MutexLock lock(&mu_);
  std::vector<Job> jobs;
  for (const auto& [sequence, entry] : by_sequence_) {
    bool wanted = states.empty();
    for (JobState state : states) wanted = wanted || entry->job.state() == state;
    if (wanted) jobs.push_back(entry->job);
  }
  return jobs;
}

absl::StatusOr<Job> JobManager::Cancel(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  FLAME_RETURN_IF_ERROR(CheckMutable());
  FLAME_ASSIGN_OR_RETURN(Entry * entry, Find(job_id));
  Job job = entry->job;
  switch (job.state()) {
    case JobState::JOB_STATE_CANCELLED:
    case JobState::JOB_STATE_CANCELLING:
      return job;  // a repeated cancel changes nothing
    case JobState::JOB_STATE_QUEUED:
      FLAME_RETURN_IF_ERROR(
          SetState(&job, JobState::JOB_STATE_CANCELLED, "cancelled while queued"));
      FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
      scheduler_.Dequeue(job_id);
      StartPlacedJobs();  // the head of the queue may have changed
      return entry->job;
    case JobState::JOB_STATE_RESTARTING:
      // Between attempts nothing trains; the old ranks are already being torn down.
      FLAME_RETURN_IF_ERROR(
          SetState(&job, JobState::JOB_STATE_CANCELLED, "cancelled between attempts"));
      FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
      return entry->job;
    case JobState::JOB_STATE_PAUSED:
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is PAUSED: nothing runs that could be cancelled"));
    case JobState::JOB_STATE_SUCCEEDED:
    case JobState::JOB_STATE_FAILED:
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " has already ended: ", StateName(job.state())));
    default:
      break;
  }
  FLAME_RETURN_IF_ERROR(SetState(&job, JobState::JOB_STATE_CANCELLING,
                                 "cancel requested; waiting for the workers to stop"));
  FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
  entry->stop_deadline_ms = clock_->NowMs() + absl::ToInt64Milliseconds(options_.stop_grace);
  return entry->job;
}

absl::StatusOr<Job> JobManager::Pause(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  FLAME_RETURN_IF_ERROR(CheckMutable());
  FLAME_ASSIGN_OR_RETURN(Entry * entry, Find(job_id));
  Job job = entry->job;
  if (job.state() == JobState::JOB_STATE_PAUSING || job.state() == JobState::JOB_STATE_PAUSED) {
    return job;
  }
  if (job.state() != JobState::JOB_STATE_RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", StateName(job.state()), "; only a RUNNING job can be paused"));
  }
  FLAME_RETURN_IF_ERROR(
      SetState(&job, JobState::JOB_STATE_PAUSING, "pause requested; waiting for a checkpoint"));
  FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
  entry->stop_deadline_ms = clock_->NowMs() + absl::ToInt64Milliseconds(options_.pause_grace);
  return entry->job;
}

absl::StatusOr<Job> JobManager::Resume(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  FLAME_RETURN_IF_ERROR(CheckMutable());
  FLAME_ASSIGN_OR_RETURN(Entry * entry, Find(job_id));
  Job job = entry->job;
  if (job.state() == JobState::JOB_STATE_QUEUED) return job;
  if (!IsResumable(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", StateName(job.state()),
                     "; only CANCELLED, PAUSED or FAILED jobs can be resumed"));
  }
  FLAME_RETURN_IF_ERROR(scheduler_.CheckFits(job.spec().resources().ranks()));
  if (scheduler_.IsPlaced(job_id)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id,
                     " is still stopping the workers of its last attempt; "
                     "try again in a few seconds"));
  }
  FLAME_RETURN_IF_ERROR(SetState(&job, JobState::JOB_STATE_QUEUED,
                                 "resumed; will continue from its newest checkpoint"));
  job.set_restarts(0);  // the restart budget counts from each resume
  FLAME_RETURN_IF_ERROR(Save(*entry, std::move(job)));
  // Its original sequence keeps its place in FIFO order.
  FLAME_RETURN_IF_ERROR(
      scheduler_.Enqueue(job_id, entry->job.sequence(), entry->job.spec().resources().ranks()));
  StartPlacedJobs();
  return entry->job;
}

absl::StatusOr<JobManager::Snapshot> JobManager::GetSnapshot(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  FLAME_ASSIGN_OR_RETURN(Entry * entry, Find(job_id));
  return Snapshot{entry->job, entry->version};
}

absl::StatusOr<std::optional<JobManager::Snapshot>> JobManager::AwaitChange(
    const std::string& job_id, uint64_t version, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  FLAME_ASSIGN_OR_RETURN(Entry * entry, Find(job_id));
  auto changed = [this, entry, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return entry->version > version || shutting_down_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  if (shutting_down_ || entry->version <= version) return std::nullopt;
  return Snapshot{entry->job, entry->version};
}

void JobManager::SetCoordinatorAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  coordinator_address_ = address;
}

void JobManager::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
}

bool JobManager::shutting_down() const {
  absl::MutexLock lock(&mu_);
  return shutting_down_;
}

}  // namespace flame::server
