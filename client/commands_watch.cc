// watch: follows a job through WatchJob until it stops, across restarts of flamed.
#include "client/commands.h"
#include "client/json_output.h"
#include "client/render.h"
#include "common/status_macros.h"

namespace flame::client {
namespace {

using flame::v1::Job;

// Shows each update: a JSON line, a line redrawn in place on a terminal, or otherwise a new line
// whenever the rendered line changes (so a log file gets one line per step reported).
class WatchPrinter {
 public:
  explicit WatchPrinter(const CommandContext& context) : context_(context) {}

  absl::Status Show(const Job& job) {
    std::ostream& out = *context_.out;
    if (context_.format == OutputFormat::kJson) return WriteJson(out, job, /*one_line=*/true);
    const std::string line = RenderWatchLine(job);
    if (line == last_line_) return absl::OkStatus();
    last_line_ = line;
    if (context_.out_is_terminal) {
      // Carriage return, the line, then erase what a longer previous line left behind. A line
      // that wrapped could not be redrawn by a carriage return, so it is cut to the width.
      std::string shown = line;
      if (context_.terminal_width > 1 &&
          shown.size() >= static_cast<size_t>(context_.terminal_width)) {
        shown.resize(static_cast<size_t>(context_.terminal_width - 1));
      }
      out << '\r' << shown << "\x1b[K" << std::flush;
      line_open_ = true;
    } else {
      out << line << std::endl;
    }
    return absl::OkStatus();
  }

  // Ends the line being redrawn, so that what follows starts on a line of its own.
  void Finish() {
    if (line_open_) *context_.out << std::endl;
    line_open_ = false;
  }

 private:
  const CommandContext& context_;
  std::string last_line_;
  bool line_open_ = false;
};

}  // namespace

absl::StatusOr<ExitCode> RunWatch(const CommandContext& context, const std::string& job_id) {
  WatchPrinter printer(context);
  ReconnectBudget budget;
  bool connected = false;  // reconnect only to a flamed that answered once; else fail fast
  flame::v1::WatchJobRequest request;
  request.set_job_id(job_id);
  while (true) {
    // Each round opens a fresh connection: a restarted flamed may listen on a new port, which
    // it writes to flamed.addr.
    absl::StatusOr<std::unique_ptr<Connection>> connection = Connection::Open(context.connection);
    if (!connection.ok()) {
      if (!connected || !budget.WaitBeforeRetry()) return connection.status();
      continue;
    }
    auto call = (*connection)->StreamContext();
    auto reader = (*connection)->stub().WatchJob(call.get(), request);
    Job job;
    while (reader->Read(&job)) {
      budget.Reset();
      connected = true;
      if (absl::Status status = printer.Show(job); !status.ok()) {
        printer.Finish();
        return status;
      }
      if (IsStoppedState(job.state())) {
        call->TryCancel();
        reader->Finish();
        printer.Finish();
        return ExitCodeForFinalState(job.state());
      }
    }
    // The stream ended before the job stopped: flamed went away, or closed the stream on
    // shutdown. Only errors that a reconnect cannot cure (NOT_FOUND, ...) end the watch.
    const grpc::Status status = reader->Finish();
    if (!status.ok() && !IsTransient(status)) {
      printer.Finish();
      return (*connection)->ToStatus(status);
    }
    if (!connected || !budget.WaitBeforeRetry()) {
      printer.Finish();
      if (!status.ok()) return (*connection)->ToStatus(status);
      return absl::UnavailableError("flamed keeps closing the watch stream");
    }
  }
}

}  // namespace flame::client
