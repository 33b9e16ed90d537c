#include "worker/rpc/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "flame/v1/worker.grpc.pb.h"
#include "worker/config/spec_conversion.h"

namespace flame::worker {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status ToAbsl(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// Worth trying again later: flamed is restarting, overloaded or briefly unreachable.
bool Retryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

Directive FromProto(flame::v1::WorkerAction action) {
  switch (action) {
    case flame::v1::WORKER_ACTION_STOP:
      return Directive::kStop;
    case flame::v1::WORKER_ACTION_CHECKPOINT_STOP:
      return Directive::kCheckpointStop;
    default:
      return Directive::kContinue;
  }
}

flame::v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kCompleted:
      return flame::v1::FINISH_REASON_COMPLETED;
    case FinishReason::kStopped:
      return flame::v1::FINISH_REASON_STOPPED;
    case FinishReason::kPaused:
      return flame::v1::FINISH_REASON_PAUSED;
    case FinishReason::kError:
      return flame::v1::FINISH_REASON_ERROR;
  }
  return flame::v1::FINISH_REASON_UNSPECIFIED;
}

void FillProgress(const ProgressUpdate& from, flame::v1::Progress* to) {
  to->set_step(from.step);
  to->set_total_steps(from.total_steps);
  to->set_tokens(from.tokens);
  to->set_loss(from.loss);
  to->set_max_loss(from.max_loss);
  to->set_lr(from.lr);
  to->set_grad_norm(from.grad_norm);
  to->set_tokens_per_second(from.tokens_per_second);
  to->set_mfu(from.mfu);
  to->set_memory_gib(from.memory_gib);
  to->set_data_loading_share(from.data_loading_share);
  to->set_skipped_steps(from.skipped_steps);
  to->set_elapsed_seconds(from.elapsed_seconds);
  to->set_tflops(from.tflops);
  to->set_memory_active_gib(from.memory_active_gib);
  to->set_memory_peak_gib(from.memory_peak_gib);
  to->set_step_seconds(from.step_seconds);
  to->set_data_loading_seconds(from.data_loading_seconds);
  to->set_eval_loss(from.eval_loss);
  to->set_eval_step(from.eval_step);
}

}  // namespace

// The gRPC stub and the translation between plain structs and protos.
class CoordinatorClient::Rpc {
 public:
  Rpc(const WorkerIdentity& identity, const ClientOptions& options)
      : identity_(identity),
        options_(options),
        stub_(flame::v1::WorkerService::NewStub(
            grpc::CreateChannel(identity.coordinator, grpc::InsecureChannelCredentials()))) {}

  absl::Status Join(int64_t pid, const std::string& hostname, flame::v1::JoinResponse* response) {
    flame::v1::JoinRequest request;
    *request.mutable_worker() = Who();
    request.set_pid(pid);
    request.set_hostname(hostname);
    grpc::ClientContext context;
    Prepare(&context);
    return ToAbsl(stub_->Join(&context, request, response));
  }

  absl::Status Heartbeat(int64_t step, Directive* directive) {
    flame::v1::HeartbeatRequest request;
    *request.mutable_worker() = Who();
    request.set_step(step);
    return Call(&flame::v1::WorkerService::Stub::Heartbeat, request, directive);
  }

  absl::Status Progress(const ProgressUpdate& progress, Directive* directive) {
    flame::v1::ProgressReport request;
    *request.mutable_worker() = Who();
    FillProgress(progress, request.mutable_progress());
    request.set_resumed_from_step(progress.resumed_from_step);
    return Call(&flame::v1::WorkerService::Stub::ReportProgress, request, directive);
  }

  absl::Status Commit(const CheckpointInfo& checkpoint, Directive* directive) {
    flame::v1::CheckpointCommit request;
    *request.mutable_worker() = Who();
    flame::v1::CheckpointRecord* record = request.mutable_checkpoint();
    record->set_step(checkpoint.step);
    record->set_path(checkpoint.path);
    record->set_bytes(checkpoint.bytes);
    record->set_checksum(checkpoint.checksum);
    record->set_time_ms(checkpoint.time_ms);
    return Call(&flame::v1::WorkerService::Stub::CommitCheckpoint, request, directive);
  }

  absl::Status Finish(FinishReason reason, const std::string& message, int64_t step) {
    flame::v1::FinishRequest request;
    *request.mutable_worker() = Who();
    request.set_reason(ToProto(reason));
    request.set_message(message);
    request.set_step(step);
    flame::v1::FinishResponse response;
    grpc::ClientContext context;
    Prepare(&context);
    return ToAbsl(stub_->Finish(&context, request, &response));
  }

 private:
  template <typename Method, typename Request>
  absl::Status Call(Method method, const Request& request, Directive* directive) {
    flame::v1::Directive reply;
    grpc::ClientContext context;
    Prepare(&context);
    const absl::Status status = ToAbsl(((*stub_).*method)(&context, request, &reply));
    if (status.ok()) *directive = FromProto(reply.action());
    return status;
  }

  flame::v1::WorkerIdentity Who() const {
    flame::v1::WorkerIdentity who;
    who.set_job_id(identity_.job_id);
    who.set_attempt(identity_.attempt);
    who.set_rank(identity_.rank);
    return who;
  }

  void Prepare(grpc::ClientContext* context) const {
    context->set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
    if (!identity_.token.empty()) {
      context->AddMetadata("authorization", absl::StrCat("Bearer ", identity_.token));
    }
  }

  WorkerIdentity identity_;
  ClientOptions options_;
  std::unique_ptr<flame::v1::WorkerService::Stub> stub_;
};

std::unique_ptr<CoordinatorClient> CoordinatorClient::Create(const WorkerIdentity& identity,
                                                             const ClientOptions& options) {
  auto client = std::unique_ptr<CoordinatorClient>(
      new CoordinatorClient(identity, options, std::make_unique<Rpc>(identity, options)));
  client->sender_thread_ = std::thread([raw = client.get()] { raw->SenderLoop(); });
  return client;
}

CoordinatorClient::CoordinatorClient(const WorkerIdentity& identity, const ClientOptions& options,
                                     std::unique_ptr<Rpc> rpc)
    : identity_(identity), options_(options), rpc_(std::move(rpc)) {}

CoordinatorClient::~CoordinatorClient() { StopThreads(); }

void CoordinatorClient::StopThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_heartbeats_ = true;
    stop_sending_ = true;
  }
  wake_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (sender_thread_.joinable()) sender_thread_.join();
}

absl::StatusOr<JoinResult> CoordinatorClient::Join(int64_t pid, const std::string& hostname) {
  const Clock::time_point deadline = Clock::now() + options_.join_deadline;
  std::chrono::milliseconds backoff = options_.initial_backoff;
  flame::v1::JoinResponse response;
  while (true) {
    const absl::Status status = rpc_->Join(pid, hostname, &response);
    if (status.ok()) break;
    if (status.code() == absl::StatusCode::kFailedPrecondition) stale_ = true;
    if (!Retryable(status) || Clock::now() + backoff > deadline) {
      return absl::Status(status.code(),
                          absl::StrCat("join ", identity_.coordinator, ": ", status.message()));
    }
    FLAME_LOG(WARNING) << "join: " << status.message() << "; retrying in " << backoff.count()
                       << " ms";
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  if (response.world_size() != identity_.world_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("flamed says the job has ", response.world_size(), " ranks, WORLD_SIZE is ",
                     identity_.world_size));
  }
  JoinResult result;
  result.config = TrainConfigFromSpec(response.spec());
  result.world_size = response.world_size();
  result.dump_folder = response.dump_folder();
  result.spec_hash = JobSpecHash(response.spec());
  result.config.dump_folder = result.dump_folder;
  result.config.spec_hash = result.spec_hash;
  return result;
}

void CoordinatorClient::StartHeartbeats() {
  if (!heartbeat_thread_.joinable()) heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

void CoordinatorClient::HeartbeatLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_heartbeats_ && !stale_) {
    lock.unlock();
    Directive directive = Directive::kContinue;
    const absl::Status status = rpc_->Heartbeat(step_.load(), &directive);
    Absorb(status, directive, "heartbeat");  // a missed beat is retried by the next one
    lock.lock();
    wake_.wait_for(lock, options_.heartbeat_interval, [this] { return stop_heartbeats_; });
  }
}

void CoordinatorClient::ReportProgress(const ProgressUpdate& progress) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stale_) return;
    size_t queued_progress = 0;
    for (const Message& m : queue_) queued_progress += std::holds_alternative<ProgressUpdate>(m);
    if (queued_progress >= options_.max_queued_progress) {
      // flamed has been away for long: keep the newest reports (and every checkpoint).
      const auto oldest =
          std::find_if(queue_.begin() + (sending_ ? 1 : 0), queue_.end(),
                       [](const Message& m) { return std::holds_alternative<ProgressUpdate>(m); });
      if (oldest != queue_.end()) queue_.erase(oldest);
    }
    queue_.emplace_back(progress);
  }
  wake_.notify_all();
}

void CoordinatorClient::CommitCheckpoint(const CheckpointInfo& checkpoint) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stale_) return;
    queue_.emplace_back(checkpoint);
  }
  wake_.notify_all();
}

Directive CoordinatorClient::Current(int64_t step) {
  step_ = step;
  if (stale_) return Directive::kAbandon;
  return static_cast<Directive>(directive_.load());
}

bool CoordinatorClient::Absorb(const absl::Status& status, Directive directive, const char* what) {
  if (status.ok()) {
    // Directives only escalate: a reply to an older request must not undo a stop.
    int current = directive_.load();
    while (static_cast<int>(directive) > current &&
           !directive_.compare_exchange_weak(current, static_cast<int>(directive))) {
    }
    return false;
  }
  if (status.code() == absl::StatusCode::kFailedPrecondition) {
    if (!stale_.exchange(true)) {
      FLAME_LOG(WARNING) << what << ": flamed no longer knows this attempt (" << status.message()
                         << "); stopping";
    }
    return false;
  }
  if (Retryable(status)) return true;
  FLAME_LOG(WARNING) << what << " refused, not retried: " << status;
  return false;
}

void CoordinatorClient::Deliver(const Message& message) {
  std::chrono::milliseconds backoff = options_.initial_backoff;
  while (!stale_) {
    Directive directive = Directive::kContinue;
    absl::Status status;
    const char* what = "progress report";
    if (const auto* progress = std::get_if<ProgressUpdate>(&message)) {
      status = rpc_->Progress(*progress, &directive);
    } else {
      what = "checkpoint commit";
      status = rpc_->Commit(std::get<CheckpointInfo>(message), &directive);
    }
    if (!Absorb(status, directive, what)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, backoff, [this] { return stop_sending_; })) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void CoordinatorClient::SenderLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_sending_ || !queue_.empty(); });
    if (stop_sending_) return;
    const Message message = queue_.front();
    sending_ = true;
    lock.unlock();
    Deliver(message);
    lock.lock();
    queue_.pop_front();
    sending_ = false;
    wake_.notify_all();
  }
}

absl::Status CoordinatorClient::Finish(FinishReason reason, const std::string& message,
                                       int64_t step) {
  const Clock::time_point deadline = Clock::now() + options_.finish_deadline;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stop_heartbeats_ = true;
    wake_.notify_all();
    // Let queued reports and checkpoint commits go out first (flamed records them in order).
    wake_.wait_until(lock, deadline, [this] { return (queue_.empty() && !sending_) || stale_; });
    if (!queue_.empty()) {
      FLAME_LOG(WARNING) << queue_.size() << " reports could not be delivered before Finish";
    }
  }
  StopThreads();
  if (stale_) return absl::FailedPreconditionError("this attempt is stale; Finish not sent");
  std::chrono::milliseconds backoff = options_.initial_backoff;
  while (true) {
    const absl::Status status = rpc_->Finish(reason, message, step);
    if (status.ok() || !Retryable(status) || Clock::now() + backoff > deadline) return status;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

}  // namespace flame::worker
