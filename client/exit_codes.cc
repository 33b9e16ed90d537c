#include "client/exit_codes.h"

namespace flame::client {

const char kExitCodeHelp[] =
    "Exit codes:\n"
    "  0  ok (watch: the job SUCCEEDED)\n"
    "  1  watch: the job ended FAILED\n"
    "  2  usage error or invalid input (bad TOML, unknown key, bad value, rejected spec)\n"
    "  3  job not found\n"
    "  4  cannot reach flamed (not running, wrong --addr, no address known)\n"
    "  5  refused in the job's current state\n"
    "  6  watch: the job ended CANCELLED\n"
    "  7  watch: the job stopped PAUSED\n"
    "  8  not authorized (missing or wrong --token)\n"
    "  9  internal error\n";

ExitCode ExitCodeForStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return ExitCode::kOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:  // an idempotency key reused for another spec
      return ExitCode::kUsage;
    case absl::StatusCode::kNotFound:
      return ExitCode::kNotFound;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return ExitCode::kUnavailable;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return ExitCode::kRefused;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return ExitCode::kUnauthorized;
    default:
      return ExitCode::kInternalError;
  }
}

ExitCode ExitCodeForFinalState(flame::v1::JobState state) {
  switch (state) {
    case flame::v1::JOB_STATE_FAILED:
      return ExitCode::kJobFailed;
    case flame::v1::JOB_STATE_CANCELLED:
      return ExitCode::kJobCancelled;
    case flame::v1::JOB_STATE_PAUSED:
      return ExitCode::kJobPaused;
    default:
      return ExitCode::kOk;
  }
}

}  // namespace flame::client
