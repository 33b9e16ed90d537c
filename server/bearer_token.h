// The bearer-token check of flamed's gRPC services: when a token is configured, a call must
// carry the metadata "authorization: Bearer <token>".
#pragma once

#include <string>

#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace flame::server {

// OK when `token` is empty or the call carries it; UNAUTHENTICATED otherwise. The comparison
// takes the same time wherever the strings differ, so the token cannot be guessed bytewise.
grpc::Status CheckBearerToken(const grpc::ServerContext& context, const std::string& token);

}  // namespace flame::server
