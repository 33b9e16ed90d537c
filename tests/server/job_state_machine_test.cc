#include "server/job_state_machine.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace flame::server {
namespace {

using flame::v1::JobState;
constexpr JobState kQueued = flame::v1::JOB_STATE_QUEUED;
constexpr JobState kStarting = flame::v1::JOB_STATE_STARTING;
constexpr JobState kRunning = flame::v1::JOB_STATE_RUNNING;
constexpr JobState kPausing = flame::v1::JOB_STATE_PAUSING;
constexpr JobState kPaused = flame::v1::JOB_STATE_PAUSED;
constexpr JobState kRestarting = flame::v1::JOB_STATE_RESTARTING;
constexpr JobState kCancelling = flame::v1::JOB_STATE_CANCELLING;
constexpr JobState kSucceeded = flame::v1::JOB_STATE_SUCCEEDED;
constexpr JobState kFailed = flame::v1::JOB_STATE_FAILED;
constexpr JobState kCancelled = flame::v1::JOB_STATE_CANCELLED;

TEST(JobStateMachine, TheMainPathsAreLegal) {
  const std::vector<std::pair<JobState, JobState>> legal = {
      {kQueued, kStarting},     {kStarting, kRunning},    {kRunning, kSucceeded},
      {kRunning, kFailed},      {kRunning, kCancelled},   {kQueued, kCancelled},
      {kStarting, kCancelling}, {kRunning, kCancelling},  {kCancelling, kCancelled},
      {kRunning, kPausing},     {kPausing, kPaused},      {kStarting, kRestarting},
      {kRunning, kRestarting},  {kRestarting, kStarting}, {kCancelled, kQueued},
      {kPaused, kQueued},       {kFailed, kQueued}};
  for (const auto& [from, to] : legal) {
    EXPECT_TRUE(CheckTransition(from, to).ok()) << StateName(from) << " -> " << StateName(to);
  }
}

TEST(JobStateMachine, IllegalTransitionsNameBothStates) {
  const absl::Status status = CheckTransition(kSucceeded, kQueued);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("SUCCEEDED"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("QUEUED"), absl::string_view::npos) << status;
}

TEST(JobStateMachine, ASucceededJobGoesNowhere) {
  for (int to = flame::v1::JobState_MIN; to <= flame::v1::JobState_MAX; ++to) {
    EXPECT_FALSE(CheckTransition(kSucceeded, static_cast<JobState>(to)).ok()) << to;
  }
}

TEST(JobStateMachine, NothingSkipsTheStartingState) {
  EXPECT_FALSE(CheckTransition(kQueued, kRunning).ok());
  EXPECT_FALSE(CheckTransition(kQueued, kSucceeded).ok());
  EXPECT_FALSE(CheckTransition(kRestarting, kRunning).ok());
}

TEST(JobStateMachine, APausedJobCannotSucceedOrBeCancelledWithoutResuming) {
  EXPECT_FALSE(CheckTransition(kPaused, kSucceeded).ok());
  EXPECT_FALSE(CheckTransition(kPaused, kCancelling).ok());
  EXPECT_FALSE(CheckTransition(kPaused, kRunning).ok());
}

TEST(JobStateMachine, ACancellingJobEndsCancelledOrSucceededOnly) {
  EXPECT_TRUE(CheckTransition(kCancelling, kCancelled).ok());
  EXPECT_TRUE(CheckTransition(kCancelling, kSucceeded).ok());
  EXPECT_FALSE(CheckTransition(kCancelling, kFailed).ok());
  EXPECT_FALSE(CheckTransition(kCancelling, kRestarting).ok());
  EXPECT_FALSE(CheckTransition(kCancelling, kPausing).ok());
}

TEST(JobStateMachine, AStateDoesNotTransitionToItself) {
  for (int state = flame::v1::JobState_MIN; state <= flame::v1::JobState_MAX; ++state) {
    const auto s = static_cast<JobState>(state);
    EXPECT_FALSE(CheckTransition(s, s).ok()) << StateName(s);
  }
}

TEST(JobStateMachine, ClassifiesStates) {
  EXPECT_TRUE(IsTerminal(kSucceeded));
  EXPECT_TRUE(IsTerminal(kFailed));
  EXPECT_TRUE(IsTerminal(kCancelled));
  EXPECT_FALSE(IsTerminal(kPaused));
  EXPECT_TRUE(IsSettled(kPaused));
  EXPECT_FALSE(IsSettled(kPausing));
  EXPECT_TRUE(HoldsResources(kRestarting));
  EXPECT_FALSE(HoldsResources(kQueued));
  EXPECT_TRUE(IsResumable(kFailed));
  EXPECT_FALSE(IsResumable(kSucceeded));
}

TEST(JobStateMachine, NamesAndLabelsDropThePrefix) {
  EXPECT_EQ(StateName(kCancelling), "CANCELLING");
  EXPECT_EQ(StateLabel(kCancelling), "cancelling");
  EXPECT_EQ(StateName(static_cast<JobState>(99)), "UNKNOWN(99)");
}

}  // namespace
}  // namespace flame::server
