// WorkerService: the gRPC API of worker ranks. A thin adapter over JobManager's worker calls.
// When flamed has a bearer token, every call needs it too (flamed hands it to the workers it
// starts as FLAME_TOKEN): worker reports change job state as much as user calls do.
#pragma once

#include <string>

#include "flame/v1/worker.grpc.pb.h"
#include "server/job_manager.h"

namespace flame::server {

class WorkerService final : public flame::v1::WorkerService::Service {
 public:
  // `auth_token` empty: no token needed.
  WorkerService(JobManager* manager, std::string auth_token);

  grpc::Status Join(grpc::ServerContext* context, const flame::v1::JoinRequest* request,
                    flame::v1::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const flame::v1::HeartbeatRequest* request,
                         flame::v1::Directive* response) override;
  grpc::Status ReportProgress(grpc::ServerContext* context,
                              const flame::v1::ProgressReport* request,
                              flame::v1::Directive* response) override;
  grpc::Status CommitCheckpoint(grpc::ServerContext* context,
                                const flame::v1::CheckpointCommit* request,
                                flame::v1::Directive* response) override;
  grpc::Status Finish(grpc::ServerContext* context, const flame::v1::FinishRequest* request,
                      flame::v1::FinishResponse* response) override;

 private:
  JobManager* const manager_;
  const std::string auth_token_;
};

}  // namespace flame::server
