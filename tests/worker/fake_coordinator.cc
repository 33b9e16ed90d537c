#include "tests/worker/fake_coordinator.h"

#include <thread>

namespace flame::worker::testing {

FakeCoordinator::FakeCoordinator(flame::v1::JobSpec spec, int32_t world_size,
                                 std::string dump_folder)
    : spec_(std::move(spec)), world_size_(world_size), dump_folder_(std::move(dump_folder)) {}

FakeCoordinator::~FakeCoordinator() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

void FakeCoordinator::Start() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
}

void FakeCoordinator::set_action(flame::v1::WorkerAction action) {
  std::lock_guard<std::mutex> lock(mutex_);
  action_ = action;
}

void FakeCoordinator::FailNextCalls(int count, grpc::StatusCode code) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_next_ = count;
  fail_code_ = code;
}

void FakeCoordinator::set_stale(bool stale) {
  std::lock_guard<std::mutex> lock(mutex_);
  stale_ = stale;
}

void FakeCoordinator::set_token(std::string token) {
  std::lock_guard<std::mutex> lock(mutex_);
  token_ = std::move(token);
}

#define FLAME_FAKE_RECORDS(name, type)        \
  std::vector<type> FakeCoordinator::name() { \
    std::lock_guard<std::mutex> lock(mutex_); \
    return name##_;                           \
  }
FLAME_FAKE_RECORDS(joins, flame::v1::JoinRequest)
FLAME_FAKE_RECORDS(progress, flame::v1::ProgressReport)
FLAME_FAKE_RECORDS(commits, flame::v1::CheckpointCommit)
FLAME_FAKE_RECORDS(finishes, flame::v1::FinishRequest)
FLAME_FAKE_RECORDS(heartbeats, flame::v1::HeartbeatRequest)
#undef FLAME_FAKE_RECORDS

int FakeCoordinator::failed_calls() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_calls_;
}

bool FakeCoordinator::WaitFor(const std::function<bool()>& done,
                              std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

grpc::Status FakeCoordinator::Gate(const grpc::ServerContext& context) {
  if (!token_.empty()) {
    const auto it = context.client_metadata().find("authorization");
    if (it == context.client_metadata().end() ||
        std::string(it->second.data(), it->second.size()) != "Bearer " + token_) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
    }
  }
  if (stale_) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "attempt is stale");
  if (fail_next_ > 0) {
    --fail_next_;
    ++failed_calls_;
    return grpc::Status(fail_code_, "scripted failure");
  }
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::Join(grpc::ServerContext* context,
                                   const flame::v1::JoinRequest* request,
                                   flame::v1::JoinResponse* response) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (grpc::Status gate = Gate(*context); !gate.ok()) return gate;
  joins_.push_back(*request);
  *response->mutable_spec() = spec_;
  response->set_world_size(world_size_);
  response->set_dump_folder(dump_folder_);
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::Heartbeat(grpc::ServerContext* context,
                                        const flame::v1::HeartbeatRequest* request,
                                        flame::v1::Directive* response) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (grpc::Status gate = Gate(*context); !gate.ok()) return gate;
  heartbeats_.push_back(*request);
  response->set_action(action_);
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::ReportProgress(grpc::ServerContext* context,
                                             const flame::v1::ProgressReport* request,
                                             flame::v1::Directive* response) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (grpc::Status gate = Gate(*context); !gate.ok()) return gate;
  progress_.push_back(*request);
  response->set_action(action_);
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::CommitCheckpoint(grpc::ServerContext* context,
                                               const flame::v1::CheckpointCommit* request,
                                               flame::v1::Directive* response) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (grpc::Status gate = Gate(*context); !gate.ok()) return gate;
  commits_.push_back(*request);
  response->set_action(action_);
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::Finish(grpc::ServerContext* context,
                                     const flame::v1::FinishRequest* request,
                                     flame::v1::FinishResponse* /*response*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (grpc::Status gate = Gate(*context); !gate.ok()) return gate;
  finishes_.push_back(*request);
  return grpc::Status::OK;
}

}  // namespace flame::worker::testing
