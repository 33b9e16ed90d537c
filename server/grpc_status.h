// absl::Status -> grpc::Status. The canonical codes are the same numbers in both, so the code
// carries over unchanged and the message with it.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace flame::server {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace flame::server
