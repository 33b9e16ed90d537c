// A connection to flamed: the channel, the stub, and per-call contexts that carry the bearer
// token and a deadline. Opening one resolves the address (address.h) but makes no RPC; gRPC
// connects on the first call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/address.h"
#include "flame/v1/coordinator.grpc.pb.h"

namespace flame::client {

struct ConnectionOptions {
  AddressSources address;
  std::string token;  // sent as `authorization: Bearer <token>` when not empty
};

class Connection {
 public:
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const ConnectionOptions& options);

  flame::v1::CoordinatorService::Stub& stub() { return *stub_; }
  const std::string& address() const { return address_; }

  // For a unary call: fails with DEADLINE_EXCEEDED rather than hanging on a stuck flamed.
  std::unique_ptr<grpc::ClientContext> UnaryContext() const;
  // For a stream that lasts as long as a job (watch, logs -f): no deadline.
  std::unique_ptr<grpc::ClientContext> StreamContext() const;

  // A failed call's status as flamectl reports it. flamed's own messages pass through verbatim
  // (they name the offending key); transport failures say which address was tried.
  absl::Status ToStatus(const grpc::Status& status) const;

 private:
  Connection(std::string address, std::string token);

  std::string address_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<flame::v1::CoordinatorService::Stub> stub_;
};

// True for failures that a reconnect can cure: flamed restarting, a dropped connection.
bool IsTransient(const grpc::Status& status);

// Paces the reconnects of a stream that follows a job (watch, logs -f) across a restart of
// flamed: one attempt a second, for up to a minute without any message getting through.
class ReconnectBudget {
 public:
  // Sleeps before the next attempt; false once the budget is spent.
  bool WaitBeforeRetry();
  // A message got through: the connection works again.
  void Reset() { failures_ = 0; }

 private:
  int failures_ = 0;
};

}  // namespace flame::client
