#include "server/attempt_outcome.h"

#include "gtest/gtest.h"

namespace flame::server {
namespace {

using flame::v1::AttemptOutcome;
using flame::v1::JobState;

flame::v1::RankProcess Rank(int rank, int exit_code, AttemptOutcome finish) {
  flame::v1::RankProcess process;
  process.set_rank(rank);
  process.set_pid(100 + rank);
  process.set_exited(true);
  process.set_exit_code(exit_code);
  process.set_finish_outcome(finish);
  return process;
}

constexpr AttemptOutcome kNoFinish = flame::v1::ATTEMPT_OUTCOME_UNSPECIFIED;
constexpr AttemptOutcome kSucceeded = flame::v1::ATTEMPT_OUTCOME_SUCCEEDED;
constexpr AttemptOutcome kFailed = flame::v1::ATTEMPT_OUTCOME_FAILED;
constexpr AttemptOutcome kCancelled = flame::v1::ATTEMPT_OUTCOME_CANCELLED;
constexpr AttemptOutcome kPaused = flame::v1::ATTEMPT_OUTCOME_PAUSED;
constexpr AttemptOutcome kLost = flame::v1::ATTEMPT_OUTCOME_LOST;

TEST(RankFailure, ACleanExitAfterFinishIsNoFailure) {
  EXPECT_FALSE(RankFailure(Rank(0, 0, kSucceeded)).has_value());
}

TEST(RankFailure, ANonZeroExitFailsTheAttemptAndSaysTheCode) {
  const std::optional<Verdict> failure = RankFailure(Rank(1, 3, kNoFinish));
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->outcome, kFailed);
  EXPECT_NE(failure->message.find("rank 1"), std::string::npos) << failure->message;
  EXPECT_NE(failure->message.find("code 3"), std::string::npos) << failure->message;
}

TEST(RankFailure, ASignalIsNamed) {
  const std::optional<Verdict> failure = RankFailure(Rank(0, 128 + 9, kNoFinish));
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->message.find("signal 9"), std::string::npos) << failure->message;
}

TEST(RankFailure, AZeroExitWithoutFinishIsAFailure) {
  const std::optional<Verdict> failure = RankFailure(Rank(0, 0, kNoFinish));
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->outcome, kFailed);
  EXPECT_NE(failure->message.find("without reporting Finish"), std::string::npos);
}

TEST(RankFailure, AnErrorReportFailsEvenWithExitZero) {
  EXPECT_TRUE(RankFailure(Rank(0, 0, kFailed)).has_value());
}

TEST(RankFailure, AnUnwatchedEndIsLostUnlessTheRankFinished) {
  const std::optional<Verdict> lost = RankFailure(Rank(0, kUnknownExitCode, kNoFinish));
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(lost->outcome, kLost);
  EXPECT_FALSE(RankFailure(Rank(0, kUnknownExitCode, kSucceeded)).has_value());
}

TEST(JudgeCompletedAttempt, RankZeroSaysHowItEnded) {
  flame::v1::Attempt attempt;
  *attempt.add_ranks() = Rank(0, 0, kPaused);
  *attempt.add_ranks() = Rank(1, 0, kPaused);
  EXPECT_EQ(JudgeCompletedAttempt(attempt).outcome, kPaused);
}

TEST(JudgeCompletedAttempt, AnyFailedRankFailsTheAttempt) {
  flame::v1::Attempt attempt;
  *attempt.add_ranks() = Rank(0, 0, kSucceeded);
  *attempt.add_ranks() = Rank(1, 1, kSucceeded);
  const Verdict verdict = JudgeCompletedAttempt(attempt);
  EXPECT_EQ(verdict.outcome, kFailed);
  EXPECT_NE(verdict.message.find("rank 1"), std::string::npos);
}

TEST(OutcomeOfFinishReason, MapsEveryReason) {
  EXPECT_EQ(OutcomeOfFinishReason(flame::v1::FINISH_REASON_COMPLETED), kSucceeded);
  EXPECT_EQ(OutcomeOfFinishReason(flame::v1::FINISH_REASON_STOPPED), kCancelled);
  EXPECT_EQ(OutcomeOfFinishReason(flame::v1::FINISH_REASON_PAUSED), kPaused);
  EXPECT_EQ(OutcomeOfFinishReason(flame::v1::FINISH_REASON_ERROR), kFailed);
  EXPECT_EQ(OutcomeOfFinishReason(flame::v1::FINISH_REASON_UNSPECIFIED), kFailed);
}

TEST(StateAfterAttempt, ARunningJobRestartsOnFailureWhileTheBudgetLasts) {
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_RUNNING, kFailed, true),
            flame::v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_RUNNING, kLost, true),
            flame::v1::JOB_STATE_RESTARTING);
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_RUNNING, kFailed, false),
            flame::v1::JOB_STATE_FAILED);
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_RUNNING, kSucceeded, true),
            flame::v1::JOB_STATE_SUCCEEDED);
}

TEST(StateAfterAttempt, ACancellingJobEndsCancelledEvenWhenItsWorkersCrash) {
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_CANCELLING, kFailed, true),
            flame::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_CANCELLING, kCancelled, true),
            flame::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_CANCELLING, kSucceeded, true),
            flame::v1::JOB_STATE_SUCCEEDED);
}

TEST(StateAfterAttempt, APausingJobIsNeverRestarted) {
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_PAUSING, kPaused, true),
            flame::v1::JOB_STATE_PAUSED);
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_PAUSING, kFailed, true),
            flame::v1::JOB_STATE_FAILED);
}

TEST(StateAfterAttempt, AnUnrequestedPauseCountsAsAFailure) {
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_RUNNING, kPaused, false),
            flame::v1::JOB_STATE_FAILED);
}

TEST(StateAfterAttempt, ADecidedStateIsKept) {
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_FAILED, kSucceeded, true),
            flame::v1::JOB_STATE_FAILED);
  EXPECT_EQ(StateAfterAttempt(flame::v1::JOB_STATE_RESTARTING, kFailed, true),
            flame::v1::JOB_STATE_RESTARTING);
}

}  // namespace
}  // namespace flame::server
