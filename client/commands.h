// flamectl's commands, one function each, independent of the command-line parser (main.cc).
//
// A command returns the exit code it decided on (`watch` reports how the job ended), or an error
// Status that main.cc prints as "flamectl: <message>" and maps with ExitCodeForStatus. Local
// checks run before anything connects, so bad input fails the same with or without flamed.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "client/exit_codes.h"
#include "flame/v1/job_spec.pb.h"

namespace flame::client {

enum class OutputFormat { kTable, kJson };

struct CommandContext {
  ConnectionOptions connection;
  OutputFormat format = OutputFormat::kTable;
  std::ostream* out = nullptr;   // results (stdout)
  bool out_is_terminal = false;  // watch redraws one line in place on a terminal
  int terminal_width = 0;        // columns of that terminal; 0 when unknown
};

struct SubmitOptions {
  std::string job_file;                // may be empty when flame_args name --job.config_file
  std::vector<std::string> flame_args;  // flame-style --section.key [value] (flame_args.h)
  std::vector<std::string> overrides;  // --set section.key=value, applied in order
  std::string name;                    // --name, wins over the file's `name`
  std::string idempotency_key;
  // Leave every check to flamed, for files that exist only on flamed's host. Unknown keys and
  // wrong types are still refused here: they cannot be sent at all.
  bool skip_local_check = false;
  // train.sh's NGPU, read only with flame-style arguments: resources.ranks when nothing sets it.
  std::optional<std::string> ngpu;
};

struct LogsOptions {
  std::string job_id;
  int rank = 0;
  bool follow = false;
};

enum class JobAction { kCancel, kPause, kResume };

// The spec `submit` sends: the job file (FILE or --job.config_file), then the flame-style
// arguments and --set overrides in order, NGPU, --name; checked locally unless skipped.
absl::StatusOr<flame::v1::JobSpec> BuildJobSpec(const SubmitOptions& options);

absl::StatusOr<ExitCode> RunSubmit(const CommandContext& context, const SubmitOptions& options);
absl::StatusOr<ExitCode> RunList(const CommandContext& context);
absl::StatusOr<ExitCode> RunStatus(const CommandContext& context, const std::string& job_id);
absl::StatusOr<ExitCode> RunJobAction(const CommandContext& context, JobAction action,
                                      const std::string& job_id);
absl::StatusOr<ExitCode> RunWatch(const CommandContext& context, const std::string& job_id);
absl::StatusOr<ExitCode> RunLogs(const CommandContext& context, const LogsOptions& options);

}  // namespace flame::client
