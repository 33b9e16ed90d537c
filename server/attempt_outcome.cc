#include "server/attempt_outcome.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace flame::server {

using flame::v1::AttemptOutcome;
using flame::v1::JobState;

namespace {

std::string DescribeExit(int exit_code) {
  // Signals arrive as 128 + signal number (the shell's convention; see LocalLauncher).
  if (exit_code > 128 && exit_code < 128 + 65) {
    const int signal = exit_code - 128;
    return absl::StrCat("was killed by signal ", signal, " (", strsignal(signal), ")");
  }
  return absl::StrCat("exited with code ", exit_code);
}

}  // namespace

std::optional<Verdict> RankFailure(const flame::v1::RankProcess& rank) {
  const std::string who = absl::StrCat("rank ", rank.rank(), " (pid ", rank.pid(), ")");
  if (rank.finish_outcome() == flame::v1::ATTEMPT_OUTCOME_FAILED) {
    return Verdict{flame::v1::ATTEMPT_OUTCOME_FAILED, absl::StrCat(who, " reported an error")};
  }
  if (rank.exit_code() == kUnknownExitCode) {
    // Nobody could wait for it, so its Finish is all there is to go by.
    if (rank.finish_outcome() != flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) return std::nullopt;
    return Verdict{flame::v1::ATTEMPT_OUTCOME_LOST,
                   absl::StrCat(who, " ended while flamed was not watching, without a Finish")};
  }
  if (rank.exit_code() != 0) {
    return Verdict{flame::v1::ATTEMPT_OUTCOME_FAILED,
                   absl::StrCat(who, " ", DescribeExit(rank.exit_code()))};
  }
  if (rank.finish_outcome() == flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED) {
    return Verdict{flame::v1::ATTEMPT_OUTCOME_FAILED,
                   absl::StrCat(who, " exited with code 0 without reporting Finish")};
  }
  return std::nullopt;
}

Verdict JudgeCompletedAttempt(const flame::v1::Attempt& attempt) {
  for (const flame::v1::RankProcess& rank : attempt.ranks()) {
    if (std::optional<Verdict> failure = RankFailure(rank)) return *failure;
  }
  if (attempt.ranks().empty()) {
    return Verdict{flame::v1::ATTEMPT_OUTCOME_LOST, "the attempt has no ranks"};
  }
  const AttemptOutcome outcome = attempt.ranks(0).finish_outcome();
  return Verdict{outcome, absl::StrCat("all ", attempt.ranks_size(), " ranks finished: ",
                                       absl::AsciiStrToLower(OutcomeName(outcome)))};
}

AttemptOutcome OutcomeOfFinishReason(flame::v1::FinishReason reason) {
  switch (reason) {
    case flame::v1::FINISH_REASON_COMPLETED:
      return flame::v1::ATTEMPT_OUTCOME_SUCCEEDED;
    case flame::v1::FINISH_REASON_STOPPED:
      return flame::v1::ATTEMPT_OUTCOME_CANCELLED;
    case flame::v1::FINISH_REASON_PAUSED:
      return flame::v1::ATTEMPT_OUTCOME_PAUSED;
    default:
      return flame::v1::ATTEMPT_OUTCOME_FAILED;
  }
}

JobState StateAfterAttempt(JobState current, AttemptOutcome outcome, bool restart_allowed) {
  const bool succeeded = outcome == flame::v1::ATTEMPT_OUTCOME_SUCCEEDED;
  switch (current) {
    case JobState::JOB_STATE_CANCELLING:
      return succeeded ? JobState::JOB_STATE_SUCCEEDED : JobState::JOB_STATE_CANCELLED;
    case JobState::JOB_STATE_PAUSING:
      if (outcome == flame::v1::ATTEMPT_OUTCOME_PAUSED) return JobState::JOB_STATE_PAUSED;
      return succeeded ? JobState::JOB_STATE_SUCCEEDED : JobState::JOB_STATE_FAILED;
    case JobState::JOB_STATE_STARTING:
    case JobState::JOB_STATE_RUNNING:
      if (succeeded) return JobState::JOB_STATE_SUCCEEDED;
      if (outcome == flame::v1::ATTEMPT_OUTCOME_CANCELLED) return JobState::JOB_STATE_CANCELLED;
      return restart_allowed ? JobState::JOB_STATE_RESTARTING : JobState::JOB_STATE_FAILED;
    default:
      return current;
  }
}

std::string OutcomeName(AttemptOutcome outcome) {
  if (!flame::v1::AttemptOutcome_IsValid(outcome)) return absl::StrCat("UNKNOWN(", outcome, ")");
  absl::string_view name = flame::v1::AttemptOutcome_Name(outcome);
  absl::ConsumePrefix(&name, "ATTEMPT_OUTCOME_");
  return std::string(name);
}

}  // namespace flame::server
