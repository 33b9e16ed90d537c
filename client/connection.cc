#include "client/connection.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace flame::client {
namespace {

// Long enough for flamed to sync a RocksDB write batch on a slow disk, short enough that a
// script does not wait forever on a wedged daemon.
constexpr std::chrono::seconds kUnaryDeadline(30);

// A restart of flamed (replaying RocksDB, reattaching workers) takes seconds, not minutes.
constexpr int kMaxReconnects = 60;
constexpr std::chrono::seconds kReconnectDelay(1);

}  // namespace

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const ConnectionOptions& options) {
  FLAME_ASSIGN_OR_RETURN(std::string address, ResolveCoordinatorAddress(options.address));
  return std::unique_ptr<Connection>(new Connection(std::move(address), options.token));
}

Connection::Connection(std::string address, std::string token)
    : address_(std::move(address)),
      token_(std::move(token)),
      channel_(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials())),
      stub_(flame::v1::CoordinatorService::NewStub(channel_)) {}

std::unique_ptr<grpc::ClientContext> Connection::UnaryContext() const {
  auto context = StreamContext();
  context->set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
  return context;
}

std::unique_ptr<grpc::ClientContext> Connection::StreamContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  // Plain metadata rather than call credentials: gRPC refuses call credentials on an insecure
  // channel, and flamed binds to loopback without TLS by default.
  if (!token_.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  return context;
}

absl::Status Connection::ToStatus(const grpc::Status& status) const {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded) {
    return absl::Status(
        code, absl::StrCat("cannot reach flamed at ", address_, ": ", status.error_message()));
  }
  return absl::Status(code, status.error_message());
}

bool IsTransient(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE;
}

bool ReconnectBudget::WaitBeforeRetry() {
  if (++failures_ > kMaxReconnects) return false;
  std::this_thread::sleep_for(kReconnectDelay);
  return true;
}

}  // namespace flame::client
