// An in-process WorkerService that records what workers send and answers as a test scripts it.
// It stands in for flamed in the RPC client and worker-process tests.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "flame/v1/worker.grpc.pb.h"

namespace flame::worker::testing {

class FakeCoordinator final : public flame::v1::WorkerService::Service {
 public:
  FakeCoordinator(flame::v1::JobSpec spec, int32_t world_size, std::string dump_folder);
  ~FakeCoordinator() override;

  // Serves on 127.0.0.1 at a free port.
  void Start();
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Scripting.
  void set_action(flame::v1::WorkerAction action);       // the directive of every reply
  void FailNextCalls(int count, grpc::StatusCode code);  // then answer normally again
  void set_stale(bool stale);                            // FAILED_PRECONDITION for all
  void set_token(std::string token);                     // require this bearer token

  // Records.
  std::vector<flame::v1::JoinRequest> joins();
  std::vector<flame::v1::ProgressReport> progress();
  std::vector<flame::v1::CheckpointCommit> commits();
  std::vector<flame::v1::FinishRequest> finishes();
  std::vector<flame::v1::HeartbeatRequest> heartbeats();
  int failed_calls();

  // Polls `done` until it holds or `timeout` passes.
  bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);

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
  // Scripted failure, staleness or authentication error for the next call, if any.
  grpc::Status Gate(const grpc::ServerContext& context);

  flame::v1::JobSpec spec_;
  int32_t world_size_;
  std::string dump_folder_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;

  std::mutex mutex_;
  flame::v1::WorkerAction action_ = flame::v1::WORKER_ACTION_CONTINUE;
  int fail_next_ = 0;
  grpc::StatusCode fail_code_ = grpc::StatusCode::UNAVAILABLE;
  int failed_calls_ = 0;
  bool stale_ = false;
  std::string token_;
  std::vector<flame::v1::JoinRequest> joins_;
  std::vector<flame::v1::ProgressReport> progress_;
  std::vector<flame::v1::CheckpointCommit> commits_;
  std::vector<flame::v1::FinishRequest> finishes_;
  std::vector<flame::v1::HeartbeatRequest> heartbeats_;
};

}  // namespace flame::worker::testing
