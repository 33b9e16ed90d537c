// flamectl: the command line of flame. Parses arguments (CLI11), runs one command from
// commands.h, prints errors as "flamectl: <message>" and exits with a code from exit_codes.h.
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/flame_args.h"

namespace flame::client {
namespace {

constexpr char kFooter[] =
    "\nWhere flamed is: --addr, else $FLAME_ADDR, else the grpc= line of <data dir>/flamed.addr\n"
    "(data dir: --data-dir, else $FLAME_DATA_DIR, else $XDG_STATE_HOME/flame or\n"
    "~/.local/state/flame). --token or $FLAME_TOKEN is sent as a bearer token.\n"
    "\n"
    "-o json prints flame.v1 messages in protobuf's JSON mapping with the .proto field names\n"
    "(64-bit integers as strings, enums by name): a Job for submit, status, cancel, pause and\n"
    "resume; {\"jobs\": [Job, ...]} for list; one Job per line for watch.\n"
    "\n"
    "submit also takes flame's arguments: --job.config_file FILE --training.steps 100\n"
    "--training.varlen ... (command line over TOML; a flag alone means true). With them, $NGPU\n"
    "sets resources.ranks when nothing else does.\n\n";

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// Prints a failed command's message, one "flamectl: " line per line of the message (a job file
// can have several problems), and returns the exit code for it.
int ReportError(const absl::Status& status) {
  for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
    std::cerr << "flamectl: " << line << "\n";
  }
  return ToInt(ExitCodeForStatus(status));
}

int Finish(const absl::StatusOr<ExitCode>& result) {
  if (!result.ok()) return ReportError(result.status());
  return ToInt(*result);
}

int Run(int argc, char** argv) {
  CLI::App app("flamectl: submit, follow and control training jobs on flamed", "flamectl");
  app.footer(std::string(kFooter) + kExitCodeHelp);
  app.require_subcommand(1);
  // Global options may also follow the subcommand: `flamectl list -o json`.
  app.fallthrough();

  std::string addr, data_dir, token, output = "table";
  app.add_option("--addr", addr, "flamed's gRPC address, HOST:PORT");
  app.add_option("--data-dir", data_dir, "flamed's data directory (to find flamed.addr)");
  app.add_option("--token", token, "bearer token for flamed");
  app.add_option("-o,--output", output, "output format of read commands: table or json")
      ->check(CLI::IsMember({"table", "json"}));

  SubmitOptions submit;
  CLI::App* submit_cmd = app.add_subcommand(
      "submit",
      "submit a job file (TOML); flame's own arguments also work: flamectl submit -- "
      "--job.config_file FILE --section.key value ...");
  submit_cmd->add_option("file", submit.job_file, "job file");
  submit_cmd->add_option("--set", submit.overrides, "override: section.key=value (repeatable)")
      ->allow_extra_args(false);
  submit_cmd->add_option("--name", submit.name, "job name (overrides the file's name)");
  submit_cmd->add_option("--idempotency-key", submit.idempotency_key,
                         "a retried submit with the same key returns the same job");
  submit_cmd->add_flag("--no-local-check", submit.skip_local_check,
                       "leave value and file checks to flamed (files on flamed's host only)");

  app.add_subcommand("list", "list jobs");
  std::string job_id;
  CLI::App* status_cmd = app.add_subcommand("status", "show one job");
  CLI::App* watch_cmd = app.add_subcommand("watch", "follow a job until it stops");
  CLI::App* cancel_cmd = app.add_subcommand("cancel", "cancel a job");
  CLI::App* pause_cmd = app.add_subcommand("pause", "save a checkpoint and stop a job");
  CLI::App* resume_cmd = app.add_subcommand("resume", "continue a job from its checkpoint");
  for (CLI::App* command : {status_cmd, watch_cmd, cancel_cmd, pause_cmd, resume_cmd}) {
    command->add_option("job", job_id, "job id")->required();
  }
  LogsOptions logs;
  CLI::App* logs_cmd = app.add_subcommand("logs", "print a rank's log");
  logs_cmd->add_option("job", logs.job_id, "job id")->required();
  logs_cmd->add_option("--rank", logs.rank, "rank whose log to print")->capture_default_str();
  logs_cmd->add_flag("-f,--follow", logs.follow, "keep printing until the job ends");

  // flame-style --section.key arguments are taken out first: CLI11 knows only flamectl's own.
  SplitCommandLine split = SplitFlameArguments(std::vector<std::string>(argv, argv + argc));
  submit.flame_args = split.flame;
  if (const char* ngpu = std::getenv("NGPU"); ngpu != nullptr) submit.ngpu = ngpu;
  std::vector<char*> own_argv;
  for (std::string& arg : split.own) own_argv.push_back(arg.data());
  try {
    app.parse(static_cast<int>(own_argv.size()), own_argv.data());
  } catch (const CLI::ParseError& error) {
    // --help exits 0; every other parse error is a usage error.
    return app.exit(error) == 0 ? ToInt(ExitCode::kOk) : ToInt(ExitCode::kUsage);
  }

  CommandContext context;
  context.connection.address = {addr, EnvOrEmpty("FLAME_ADDR"), data_dir,
                                EnvOrEmpty("FLAME_DATA_DIR")};
  context.connection.token = token.empty() ? EnvOrEmpty("FLAME_TOKEN") : token;
  context.format = output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
  context.out = &std::cout;
  context.out_is_terminal = ::isatty(STDOUT_FILENO) == 1;
  if (winsize size{}; context.out_is_terminal && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0) {
    context.terminal_width = size.ws_col;
  }

  const std::string command = app.get_subcommands().front()->get_name();
  if (command == "submit") return Finish(RunSubmit(context, submit));
  if (command == "list") return Finish(RunList(context));
  if (command == "status") return Finish(RunStatus(context, job_id));
  if (command == "watch") return Finish(RunWatch(context, job_id));
  if (command == "logs") return Finish(RunLogs(context, logs));
  if (command == "cancel") return Finish(RunJobAction(context, JobAction::kCancel, job_id));
  if (command == "pause") return Finish(RunJobAction(context, JobAction::kPause, job_id));
  if (command == "resume") return Finish(RunJobAction(context, JobAction::kResume, job_id));
  return ReportError(absl::InternalError("unhandled command " + command));
}

}  // namespace
}  // namespace flame::client

int main(int argc, char** argv) {
  // The commands report failures as Status; this catches what a library throws regardless
  // (std::bad_alloc, a stray exception from a parser) so that flamectl never dies uncaught.
  try {
    return flame::client::Run(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "flamectl: internal error: " << error.what() << "\n";
    return flame::client::ToInt(flame::client::ExitCode::kInternalError);
  }
}
