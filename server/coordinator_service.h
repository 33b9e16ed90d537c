// CoordinatorService: the user-facing gRPC API (flamectl, dashboards). A thin adapter: it
// checks the bearer token on calls that change jobs, translates protos to JobManager calls and
// absl::Status to grpc::Status, and runs the two streams (WatchJob, StreamLogs).
#pragma once

#include <string>

#include "absl/time/time.h"
#include "flame/v1/coordinator.grpc.pb.h"
#include "server/job_manager.h"

namespace flame::server {

struct CoordinatorServiceOptions {
  // When set, SubmitJob, CancelJob, PauseJob and ResumeJob need the metadata
  // "authorization: Bearer <auth_token>".
  std::string auth_token;
  // How often a waiting stream checks whether its client went away or flamed is stopping.
  absl::Duration stream_poll = absl::Milliseconds(250);
};

class CoordinatorService final : public flame::v1::CoordinatorService::Service {
 public:
  CoordinatorService(JobManager* manager, CoordinatorServiceOptions options);

  grpc::Status SubmitJob(grpc::ServerContext* context, const flame::v1::SubmitJobRequest* request,
                         flame::v1::Job* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const flame::v1::GetJobRequest* request,
                      flame::v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const flame::v1::ListJobsRequest* request,
                        flame::v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const flame::v1::CancelJobRequest* request,
                         flame::v1::Job* response) override;
  grpc::Status PauseJob(grpc::ServerContext* context, const flame::v1::PauseJobRequest* request,
                        flame::v1::Job* response) override;
  grpc::Status ResumeJob(grpc::ServerContext* context, const flame::v1::ResumeJobRequest* request,
                         flame::v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const flame::v1::WatchJobRequest* request,
                        grpc::ServerWriter<flame::v1::Job>* writer) override;
  grpc::Status StreamLogs(grpc::ServerContext* context, const flame::v1::StreamLogsRequest* request,
                          grpc::ServerWriter<flame::v1::LogChunk>* writer) override;

 private:
  // OK when no token is configured or the call carries the right one.
  grpc::Status Authorize(const grpc::ServerContext& context) const;

  JobManager* const manager_;
  const CoordinatorServiceOptions options_;
};

}  // namespace flame::server
