// CoordinatorClient: one rank's side of flame.v1.WorkerService, behind plain C++ types.
//
// This header must not include generated protobuf headers: main.cc and the Torch code include
// it (DESIGN.md). The gRPC stub lives in coordinator_client.cc only.
//
// Protocol (proto/flame/v1/worker.proto):
//   Join once (retried while flamed is unreachable) -> the resolved spec as a TrainConfig.
//   A heartbeat thread calls Heartbeat about every second and keeps the latest Directive.
//   ReportProgress / CommitCheckpoint are queued and sent in order by a sender thread, retried
//   with exponential backoff while flamed is unreachable (a coordinator restart loses nothing).
//   Finish drains the queue (bounded wait) and reports how the rank ended.
// A FAILED_PRECONDITION answer to anything means this attempt is stale: the client stops talking
// and its directive becomes kAbandon, so the trainer exits at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/config/train_config.h"
#include "worker/progress.h"
#include "worker/rpc/worker_identity.h"

namespace flame::worker {

struct JoinResult {
  TrainConfig config;  // dump_folder (absolute) and spec_hash filled in
  int32_t world_size = 1;
  std::string dump_folder;
  std::string spec_hash;  // JobSpecHash of the resolved spec
};

// How the rank ended (flame.v1.FinishReason).
enum class FinishReason { kCompleted, kStopped, kPaused, kError };

struct ClientOptions {
  std::chrono::milliseconds rpc_timeout{5000};
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
  std::chrono::milliseconds join_deadline{120000};   // keep trying to join this long
  std::chrono::milliseconds finish_deadline{30000};  // drain + Finish for at most this long
  size_t max_queued_progress = 1000;                 // older progress reports are dropped
};

class CoordinatorClient final : public ProgressSink, public DirectiveSource {
 public:
  static std::unique_ptr<CoordinatorClient> Create(const WorkerIdentity& identity,
                                                   const ClientOptions& options = {});
  ~CoordinatorClient() override;

  // FAILED_PRECONDITION when flamed says this attempt is stale.
  absl::StatusOr<JoinResult> Join(int64_t pid, const std::string& hostname);
  void StartHeartbeats();

  // ProgressSink: queue and return.
  void ReportProgress(const ProgressUpdate& progress) override;
  void CommitCheckpoint(const CheckpointInfo& checkpoint) override;
  // DirectiveSource: the latest directive from any reply.
  Directive Current(int64_t step) override;

  // Stops the heartbeats, drains the queue, sends Finish. Call once, at the end.
  absl::Status Finish(FinishReason reason, const std::string& message, int64_t step);

  bool stale() const { return stale_.load(); }

  class Rpc;  // the gRPC side (coordinator_client.cc)

 private:
  using Message = std::variant<ProgressUpdate, CheckpointInfo>;

  CoordinatorClient(const WorkerIdentity& identity, const ClientOptions& options,
                    std::unique_ptr<Rpc> rpc);
  void HeartbeatLoop();
  void SenderLoop();
  // Sends one message until it is delivered, found stale, refused for good, or `stop_sending_`.
  void Deliver(const Message& message);
  // Records a reply: its directive, or staleness. Returns whether to retry.
  bool Absorb(const absl::Status& status, Directive directive, const char* what);
  void StopThreads();

  WorkerIdentity identity_;
  ClientOptions options_;
  std::unique_ptr<Rpc> rpc_;

  std::atomic<int> directive_{static_cast<int>(Directive::kContinue)};
  std::atomic<bool> stale_{false};
  std::atomic<int64_t> step_{0};

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Message> queue_;  // guarded by mutex_
  bool sending_ = false;       // guarded by mutex_: the sender holds a message
  bool stop_heartbeats_ = false;
  bool stop_sending_ = false;
  std::thread heartbeat_thread_;
  std::thread sender_thread_;
};

}  // namespace flame::worker
