#include "server/job_state_machine.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace flame::server {
namespace {

using flame::v1::JobState;

// The states each state may move to. Beyond the main paths drawn in the header:
// - STARTING/RESTARTING -> FAILED: workers could not be launched, or died, with no budget left.
// - PAUSING -> CANCELLING: a cancel overrides a pause in progress.
// - PAUSING/CANCELLING -> SUCCEEDED: the workers finished the last step before they saw the
//   directive; the job did complete, and saying otherwise would hide a finished model.
// - PAUSING -> FAILED: a rank died while saving; no automatic restart, since the user asked it
//   to stop. Resume continues from the newest checkpoint that was committed.
// - RESTARTING -> CANCELLED: no attempt runs between attempts, so a cancel takes effect at once.
std::vector<JobState> LegalTargets(JobState from) {
  switch (from) {
    case JobState::JOB_STATE_QUEUED:
      return {JobState::JOB_STATE_STARTING, JobState::JOB_STATE_CANCELLED};
    case JobState::JOB_STATE_STARTING:
      return {JobState::JOB_STATE_RUNNING, JobState::JOB_STATE_CANCELLING,
              JobState::JOB_STATE_RESTARTING, JobState::JOB_STATE_FAILED};
    case JobState::JOB_STATE_RUNNING:
      return {JobState::JOB_STATE_SUCCEEDED,  JobState::JOB_STATE_FAILED,
              JobState::JOB_STATE_CANCELLED,  JobState::JOB_STATE_PAUSING,
              JobState::JOB_STATE_CANCELLING, JobState::JOB_STATE_RESTARTING};
    case JobState::JOB_STATE_PAUSING:
      return {JobState::JOB_STATE_PAUSED, JobState::JOB_STATE_CANCELLING,
              JobState::JOB_STATE_SUCCEEDED, JobState::JOB_STATE_FAILED};
    case JobState::JOB_STATE_CANCELLING:
      return {JobState::JOB_STATE_CANCELLED, JobState::JOB_STATE_SUCCEEDED};
    case JobState::JOB_STATE_RESTARTING:
      return {JobState::JOB_STATE_STARTING, JobState::JOB_STATE_CANCELLED,
              JobState::JOB_STATE_FAILED};
    case JobState::JOB_STATE_PAUSED:
    case JobState::JOB_STATE_CANCELLED:
    case JobState::JOB_STATE_FAILED:
      return {JobState::JOB_STATE_QUEUED};
    default:  // SUCCEEDED is final; UNSPECIFIED and unknown values lead nowhere.
      return {};
  }
}

}  // namespace

absl::Status CheckTransition(JobState from, JobState to) {
  for (JobState target : LegalTargets(from)) {
    if (target == to) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("a job cannot go from ", StateName(from), " to ", StateName(to)));
}

bool IsTerminal(JobState state) {
  return state == JobState::JOB_STATE_SUCCEEDED || state == JobState::JOB_STATE_FAILED ||
         state == JobState::JOB_STATE_CANCELLED;
}

bool IsSettled(JobState state) { return IsTerminal(state) || state == JobState::JOB_STATE_PAUSED; }

bool HoldsResources(JobState state) {
  return state == JobState::JOB_STATE_STARTING || state == JobState::JOB_STATE_RUNNING ||
         state == JobState::JOB_STATE_PAUSING || state == JobState::JOB_STATE_CANCELLING ||
         state == JobState::JOB_STATE_RESTARTING;
}

bool IsResumable(JobState state) {
  return state == JobState::JOB_STATE_CANCELLED || state == JobState::JOB_STATE_PAUSED ||
         state == JobState::JOB_STATE_FAILED;
}

std::string StateName(JobState state) {
  if (!flame::v1::JobState_IsValid(state)) return absl::StrCat("UNKNOWN(", state, ")");
  absl::string_view name = flame::v1::JobState_Name(state);
  absl::ConsumePrefix(&name, "JOB_STATE_");
  return std::string(name);
}

std::string StateLabel(JobState state) { return absl::AsciiStrToLower(StateName(state)); }

}  // namespace flame::server
