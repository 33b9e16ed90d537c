#include "server/worker_service.h"

#include <utility>

#include "server/bearer_token.h"
#include "server/grpc_status.h"

namespace flame::server {
namespace {

// Fills a Directive from the manager's answer.
grpc::Status Answer(const absl::StatusOr<flame::v1::WorkerAction>& action,
                    flame::v1::Directive* response) {
  if (!action.ok()) return ToGrpcStatus(action.status());
  response->set_action(*action);
  return grpc::Status::OK;
}

}  // namespace

WorkerService::WorkerService(JobManager* manager, std::string auth_token)
    : manager_(manager), auth_token_(std::move(auth_token)) {}

grpc::Status WorkerService::Join(grpc::ServerContext* context,
                                 const flame::v1::JoinRequest* request,
                                 flame::v1::JoinResponse* response) {
  if (grpc::Status auth = CheckBearerToken(*context, auth_token_); !auth.ok()) return auth;
  absl::StatusOr<flame::v1::JoinResponse> joined = manager_->Join(*request);
  if (!joined.ok()) return ToGrpcStatus(joined.status());
  *response = *std::move(joined);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Heartbeat(grpc::ServerContext* context,
                                      const flame::v1::HeartbeatRequest* request,
                                      flame::v1::Directive* response) {
  if (grpc::Status auth = CheckBearerToken(*context, auth_token_); !auth.ok()) return auth;
  return Answer(manager_->Heartbeat(*request), response);
}

grpc::Status WorkerService::ReportProgress(grpc::ServerContext* context,
                                           const flame::v1::ProgressReport* request,
                                           flame::v1::Directive* response) {
  if (grpc::Status auth = CheckBearerToken(*context, auth_token_); !auth.ok()) return auth;
  return Answer(manager_->ReportProgress(*request), response);
}

grpc::Status WorkerService::CommitCheckpoint(grpc::ServerContext* context,
                                             const flame::v1::CheckpointCommit* request,
                                             flame::v1::Directive* response) {
  if (grpc::Status auth = CheckBearerToken(*context, auth_token_); !auth.ok()) return auth;
  return Answer(manager_->CommitCheckpoint(*request), response);
}

grpc::Status WorkerService::Finish(grpc::ServerContext* context,
                                   const flame::v1::FinishRequest* request,
                                   flame::v1::FinishResponse* response) {
  if (grpc::Status auth = CheckBearerToken(*context, auth_token_); !auth.ok()) return auth;
  return ToGrpcStatus(manager_->Finish(*request));
}

}  // namespace flame::server
