// flamectl's exit codes: the contract with scripts. `flamectl --help` prints the same table
// (kExitCodeHelp), so keep the two in step when a code is added. Codes never change meaning.
#pragma once

#include "absl/status/status.h"
#include "flame/v1/job.pb.h"

namespace flame::client {

enum class ExitCode : int {
  kOk = 0,
  kJobFailed = 1,      // watch: the job ended FAILED
  kUsage = 2,          // bad command line, bad job file, a value flamed rejected
  kNotFound = 3,       // no such job
  kUnavailable = 4,    // flamed cannot be reached, or no address is known
  kRefused = 5,        // not allowed in the job's state (cancel a finished job, ...)
  kJobCancelled = 6,   // watch: the job ended CANCELLED
  kJobPaused = 7,      // watch: the job stopped PAUSED (resume continues it)
  kUnauthorized = 8,   // missing or wrong --token
  kInternalError = 9,  // anything else: a bug or an unexpected answer
};

// The help text that lists every code above.
extern const char kExitCodeHelp[];

// The exit code for an error (or kOk for an OK status). Statuses from flamed and from local
// checks use the same mapping: INVALID_ARGUMENT means bad input whoever found it.
ExitCode ExitCodeForStatus(const absl::Status& status);

// How `flamectl watch` exits when the job reaches `state`; kOk for a state that is not an end.
ExitCode ExitCodeForFinalState(flame::v1::JobState state);

inline int ToInt(ExitCode code) { return static_cast<int>(code); }

}  // namespace flame::client
