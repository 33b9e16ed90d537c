// logs: a rank's output through StreamLogs. The byte cursor (next_offset) survives a dropped
// stream, so a reconnect continues exactly where the last chunk ended: nothing lost or repeated.
#include "client/commands.h"
#include "common/status_macros.h"

namespace flame::client {

absl::StatusOr<ExitCode> RunLogs(const CommandContext& context, const LogsOptions& options) {
  if (options.rank < 0) return absl::InvalidArgumentError("--rank must not be negative");
  ReconnectBudget budget;
  bool connected = false;  // reconnect only to a flamed that answered once; else fail fast
  flame::v1::StreamLogsRequest request;
  request.set_job_id(options.job_id);
  request.set_rank(options.rank);
  request.set_follow(options.follow);
  request.set_offset(0);
  while (true) {
    absl::StatusOr<std::unique_ptr<Connection>> connection = Connection::Open(context.connection);
    if (!connection.ok()) {
      if (!connected || !budget.WaitBeforeRetry()) return connection.status();
      continue;
    }
    auto call = (*connection)->StreamContext();
    auto reader = (*connection)->stub().StreamLogs(call.get(), request);
    flame::v1::LogChunk chunk;
    while (reader->Read(&chunk)) {
      budget.Reset();
      connected = true;
      context.out->write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
      context.out->flush();
      request.set_offset(chunk.next_offset());
    }
    const grpc::Status status = reader->Finish();
    if (status.ok()) return ExitCode::kOk;  // the end of the log (without -f), or the job ended
    if (!IsTransient(status) || !connected || !budget.WaitBeforeRetry()) {
      return (*connection)->ToStatus(status);
    }
  }
}

}  // namespace flame::client
