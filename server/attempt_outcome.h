// How an attempt ended, judged from what its ranks did (exit codes) and said (Finish), and what
// that means for the job. Pure logic, shared by live supervision and by recovery after a
// flamed restart, so that both reach the same verdict from the same facts.
#pragma once

#include <optional>
#include <string>

#include "flame/v1/job.pb.h"
#include "flame/v1/worker.pb.h"

namespace flame::server {

// Exit code recorded for a rank that ended while nobody could wait for it (flamed was down).
inline constexpr int kUnknownExitCode = -1;

struct Verdict {
  flame::v1::AttemptOutcome outcome = flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED;
  std::string message;
};

// The failure one exited rank means for its whole attempt, or nullopt when the rank ended well
// (exit 0 after a Finish that was not an error) and the others should be awaited. Ending well
// needs both: a zero exit without a Finish is a worker that lost its way, and is a failure.
std::optional<Verdict> RankFailure(const flame::v1::RankProcess& rank);

// The verdict on an attempt whose ranks have all exited and none of which failed: rank 0's
// Finish, which owns the checkpoints and progress and relays directives to the others.
Verdict JudgeCompletedAttempt(const flame::v1::Attempt& attempt);

// The outcome a rank's Finish reports: COMPLETED -> SUCCEEDED, STOPPED -> CANCELLED,
// PAUSED -> PAUSED, anything else -> FAILED.
flame::v1::AttemptOutcome OutcomeOfFinishReason(flame::v1::FinishReason reason);

// The job state that follows an attempt's outcome, given the state the job was in when the
// outcome became known and whether its restart budget allows another attempt:
// - CANCELLING ends CANCELLED whatever happened, unless the job in fact completed;
// - PAUSING ends PAUSED when the ranks paused, SUCCEEDED when they completed, else FAILED
//   (no automatic restart: the user asked it to stop);
// - STARTING/RUNNING: SUCCEEDED and CANCELLED stand; FAILED, LOST and an unrequested PAUSED
//   restart while the budget lasts, else FAILED;
// - any other state (already decided) is kept.
flame::v1::JobState StateAfterAttempt(flame::v1::JobState current,
                                      flame::v1::AttemptOutcome outcome, bool restart_allowed);

// "SUCCEEDED", "LOST", ...: the enum name without its prefix, for messages.
std::string OutcomeName(flame::v1::AttemptOutcome outcome);

}  // namespace flame::server
