#include "server/coordinator_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/bearer_token.h"
#include "server/grpc_status.h"
#include "server/job_state_machine.h"

namespace flame::server {
namespace {

constexpr size_t kLogChunkBytes = 64 * 1024;

grpc::Status Answer(absl::StatusOr<flame::v1::Job> job, flame::v1::Job* response) {
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = *std::move(job);
  return grpc::Status::OK;
}

// Up to `max_bytes` of `path` from `offset`. A missing file is an empty log (the rank has not
// started yet); an offset past the end is the caller's mistake.
absl::StatusOr<std::string> ReadLogChunk(const std::string& path, int64_t offset,
                                         size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    if (offset == 0) return std::string();
    return absl::OutOfRangeError(absl::StrCat("offset ", offset, " is past the end of ", path,
                                              ", which does not exist yet"));
  }
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size >= 0 && offset > size) {
    ::close(fd);
    return absl::OutOfRangeError(
        absl::StrCat("offset ", offset, " is past the end of ", path, " (", size, " bytes)"));
  }
  std::string data(max_bytes, '\0');
  ssize_t n;
  do {
    n = ::pread(fd, data.data(), data.size(), offset);
  } while (n < 0 && errno == EINTR);
  const int error = errno;
  ::close(fd);
  if (n < 0) return absl::InternalError(absl::StrCat("read ", path, ": ", strerror(error)));
  data.resize(static_cast<size_t>(n));
  return data;
}

}  // namespace

CoordinatorService::CoordinatorService(JobManager* manager, CoordinatorServiceOptions options)
    : manager_(manager), options_(std::move(options)) {}

grpc::Status CoordinatorService::Authorize(const grpc::ServerContext& context) const {
  return CheckBearerToken(context, options_.auth_token);
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const flame::v1::SubmitJobRequest* request,
                                           flame::v1::Job* response) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  return Answer(manager_->Submit(request->spec(), request->idempotency_key()), response);
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const flame::v1::GetJobRequest* request,
                                        flame::v1::Job* response) {
  return Answer(manager_->Get(request->job_id()), response);
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context,
                                          const flame::v1::ListJobsRequest* request,
                                          flame::v1::ListJobsResponse* response) {
  std::vector<flame::v1::JobState> states;
  for (int state : request->states()) states.push_back(static_cast<flame::v1::JobState>(state));
  for (flame::v1::Job& job : manager_->List(states)) {
    // A list is a summary: metric histories (up to hundreds of points per job) would make it
    // outgrow gRPC's message limit on a busy host. GetJob and WatchJob carry them.
    job.clear_history();
    *response->add_jobs() = std::move(job);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const flame::v1::CancelJobRequest* request,
                                           flame::v1::Job* response) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  return Answer(manager_->Cancel(request->job_id()), response);
}

grpc::Status CoordinatorService::PauseJob(grpc::ServerContext* context,
                                          const flame::v1::PauseJobRequest* request,
                                          flame::v1::Job* response) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  return Answer(manager_->Pause(request->job_id()), response);
}

grpc::Status CoordinatorService::ResumeJob(grpc::ServerContext* context,
                                           const flame::v1::ResumeJobRequest* request,
                                           flame::v1::Job* response) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  return Answer(manager_->Resume(request->job_id()), response);
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context,
                                          const flame::v1::WatchJobRequest* request,
                                          grpc::ServerWriter<flame::v1::Job>* writer) {
  absl::StatusOr<JobManager::Snapshot> snapshot = manager_->GetSnapshot(request->job_id());
  if (!snapshot.ok()) return ToGrpcStatus(snapshot.status());
  if (!writer->Write(snapshot->job)) return grpc::Status::OK;  // the client went away
  while (!IsSettled(snapshot->job.state())) {
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "watch ended");
    absl::StatusOr<std::optional<JobManager::Snapshot>> next =
        manager_->AwaitChange(request->job_id(), snapshot->version, options_.stream_poll);
    if (!next.ok()) return ToGrpcStatus(next.status());
    if (!next->has_value()) {
      if (manager_->shutting_down()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "flamed is shutting down");
      }
      continue;
    }
    snapshot = **next;
    if (!writer->Write(snapshot->job)) return grpc::Status::OK;
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::StreamLogs(grpc::ServerContext* context,
                                            const flame::v1::StreamLogsRequest* request,
                                            grpc::ServerWriter<flame::v1::LogChunk>* writer) {
  absl::StatusOr<flame::v1::Job> job = manager_->Get(request->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  const int ranks = job->spec().resources().ranks();
  if (request->rank() < 0 || request->rank() >= ranks) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", request->rank(), " is not in job ", job->id(),
                                     " (ranks 0..", ranks - 1, ")"));
  }
  if (request->offset() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "offset must not be negative");
  }
  const std::string path = absl::StrCat(job->job_dir(), "/logs/rank-", request->rank(), ".log");
  int64_t offset = request->offset();
  while (true) {
    // Read the state before draining: once a settled job's file is drained, nothing follows.
    absl::StatusOr<flame::v1::Job> now = manager_->Get(request->job_id());
    if (!now.ok()) return ToGrpcStatus(now.status());
    const bool settled = IsSettled(now->state());
    while (true) {
      absl::StatusOr<std::string> data = ReadLogChunk(path, offset, kLogChunkBytes);
      if (!data.ok()) return ToGrpcStatus(data.status());
      if (data->empty()) break;
      offset += static_cast<int64_t>(data->size());
      flame::v1::LogChunk chunk;
      chunk.set_rank(request->rank());
      chunk.set_data(*std::move(data));
      chunk.set_next_offset(offset);
      if (!writer->Write(chunk)) return grpc::Status::OK;  // the client went away
    }
    if (!request->follow() || settled) return grpc::Status::OK;
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "follow ended");
    if (manager_->shutting_down()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "flamed is shutting down; reconnect with the last next_offset");
    }
    absl::SleepFor(options_.stream_poll);
  }
}

}  // namespace flame::server
