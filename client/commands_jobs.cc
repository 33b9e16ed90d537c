// submit, list, status, cancel, pause, resume: one unary RPC each.
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/flame_args.h"
#include "client/job_file.h"
#include "client/json_output.h"
#include "client/render.h"
#include "common/clock.h"
#include "common/status_macros.h"

namespace flame::client {
namespace {

using flame::v1::Job;

// submit, cancel, pause and resume all answer with the job: a summary line or its JSON.
absl::StatusOr<ExitCode> PrintJobSummary(const CommandContext& context, const Job& job) {
  if (context.format == OutputFormat::kJson) {
    FLAME_RETURN_IF_ERROR(WriteJson(*context.out, job, /*one_line=*/false));
  } else {
    *context.out << RenderJobSummary(job) << std::endl;
  }
  return ExitCode::kOk;
}

absl::StatusOr<std::string> CurrentDirectory() {
  std::error_code error;
  std::filesystem::path cwd = std::filesystem::current_path(error);
  if (error) return absl::InternalError("cannot read the current directory: " + error.message());
  return cwd.string();
}

// The job file named either as FILE or as flame's --job.config_file, not both.
absl::StatusOr<std::string> JobFilePath(const SubmitOptions& options, const FlameArguments& flame) {
  if (flame.config_file.empty()) {
    if (options.job_file.empty() && options.flame_args.empty()) {
      return absl::InvalidArgumentError(
          "submit needs a job file: flamectl submit FILE, or flame's --job.config_file FILE");
    }
    return options.job_file;
  }
  if (!options.job_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("two job files: ", options.job_file,
                                                   " and --job.config_file ", flame.config_file,
                                                   "; give one"));
  }
  return flame.config_file;
}

}  // namespace

// The spec as the user wrote it, flame's precedence (command line over TOML): the file, then
// the flame-style arguments and each --set in order, then --name.
absl::StatusOr<flame::v1::JobSpec> BuildJobSpec(const SubmitOptions& options) {
  FLAME_ASSIGN_OR_RETURN(const FlameArguments flame, ParseFlameArguments(options.flame_args));
  FLAME_ASSIGN_OR_RETURN(const std::string job_file, JobFilePath(options, flame));
  flame::v1::JobSpec spec;
  if (!job_file.empty()) {
    FLAME_ASSIGN_OR_RETURN(spec, ReadJobFile(job_file));
  }
  FLAME_ASSIGN_OR_RETURN(const std::string cwd, CurrentDirectory());
  FLAME_RETURN_IF_ERROR(ApplyFlameArguments(flame, cwd, &spec));
  for (const std::string& assignment : options.overrides) {
    FLAME_RETURN_IF_ERROR(ApplyOverride(assignment, cwd, &spec));
  }
  if (!options.flame_args.empty()) FLAME_RETURN_IF_ERROR(ApplyNgpu(options.ngpu, &spec));
  if (!options.name.empty()) spec.set_name(options.name);
  if (!options.skip_local_check) FLAME_RETURN_IF_ERROR(CheckJobSpecLocally(spec));
  return spec;
}

absl::StatusOr<ExitCode> RunSubmit(const CommandContext& context, const SubmitOptions& options) {
  flame::v1::SubmitJobRequest request;
  FLAME_ASSIGN_OR_RETURN(*request.mutable_spec(), BuildJobSpec(options));
  request.set_idempotency_key(options.idempotency_key);

  FLAME_ASSIGN_OR_RETURN(auto connection, Connection::Open(context.connection));
  Job job;
  auto call = connection->UnaryContext();
  FLAME_RETURN_IF_ERROR(
      connection->ToStatus(connection->stub().SubmitJob(call.get(), request, &job)));
  return PrintJobSummary(context, job);
}

absl::StatusOr<ExitCode> RunList(const CommandContext& context) {
  FLAME_ASSIGN_OR_RETURN(auto connection, Connection::Open(context.connection));
  flame::v1::ListJobsResponse response;
  auto call = connection->UnaryContext();
  FLAME_RETURN_IF_ERROR(connection->ToStatus(
      connection->stub().ListJobs(call.get(), flame::v1::ListJobsRequest(), &response)));
  if (context.format == OutputFormat::kJson) {
    FLAME_RETURN_IF_ERROR(WriteJson(*context.out, response, /*one_line=*/false));
  } else {
    const std::vector<Job> jobs(response.jobs().begin(), response.jobs().end());
    *context.out << RenderJobTable(jobs, SystemClock::Get()->NowMs()) << std::flush;
  }
  return ExitCode::kOk;
}

absl::StatusOr<ExitCode> RunStatus(const CommandContext& context, const std::string& job_id) {
  FLAME_ASSIGN_OR_RETURN(auto connection, Connection::Open(context.connection));
  flame::v1::GetJobRequest request;
  request.set_job_id(job_id);
  Job job;
  auto call = connection->UnaryContext();
  FLAME_RETURN_IF_ERROR(connection->ToStatus(connection->stub().GetJob(call.get(), request, &job)));
  if (context.format == OutputFormat::kJson) {
    FLAME_RETURN_IF_ERROR(WriteJson(*context.out, job, /*one_line=*/false));
  } else {
    *context.out << RenderJobDetails(job, SystemClock::Get()->NowMs()) << std::flush;
  }
  return ExitCode::kOk;
}

absl::StatusOr<ExitCode> RunJobAction(const CommandContext& context, JobAction action,
                                      const std::string& job_id) {
  FLAME_ASSIGN_OR_RETURN(auto connection, Connection::Open(context.connection));
  auto call = connection->UnaryContext();
  auto& stub = connection->stub();
  Job job;
  grpc::Status status;
  switch (action) {
    case JobAction::kCancel: {
      flame::v1::CancelJobRequest request;
      request.set_job_id(job_id);
      status = stub.CancelJob(call.get(), request, &job);
      break;
    }
    case JobAction::kPause: {
      flame::v1::PauseJobRequest request;
      request.set_job_id(job_id);
      status = stub.PauseJob(call.get(), request, &job);
      break;
    }
    case JobAction::kResume: {
      flame::v1::ResumeJobRequest request;
      request.set_job_id(job_id);
      status = stub.ResumeJob(call.get(), request, &job);
      break;
    }
  }
  FLAME_RETURN_IF_ERROR(connection->ToStatus(status));
  return PrintJobSummary(context, job);
}

}  // namespace flame::client
