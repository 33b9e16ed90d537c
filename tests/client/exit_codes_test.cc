#include "client/exit_codes.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

TEST(ExitCodeForStatus, MapsEachKindOfFailureToItsDocumentedCode) {
  EXPECT_EQ(ExitCodeForStatus(absl::OkStatus()), ExitCode::kOk);
  EXPECT_EQ(ExitCodeForStatus(absl::InvalidArgumentError("training.steps ...")), ExitCode::kUsage);
  EXPECT_EQ(ExitCodeForStatus(absl::NotFoundError("no job j-1")), ExitCode::kNotFound);
  EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError("down")), ExitCode::kUnavailable);
  EXPECT_EQ(ExitCodeForStatus(absl::DeadlineExceededError("slow")), ExitCode::kUnavailable);
  EXPECT_EQ(ExitCodeForStatus(absl::FailedPreconditionError("finished")), ExitCode::kRefused);
  EXPECT_EQ(ExitCodeForStatus(absl::UnauthenticatedError("token")), ExitCode::kUnauthorized);
  EXPECT_EQ(ExitCodeForStatus(absl::PermissionDeniedError("token")), ExitCode::kUnauthorized);
  EXPECT_EQ(ExitCodeForStatus(absl::InternalError("bug")), ExitCode::kInternalError);
}

TEST(ExitCodeForFinalState, TellsHowAWatchedJobEnded) {
  EXPECT_EQ(ExitCodeForFinalState(flame::v1::JOB_STATE_SUCCEEDED), ExitCode::kOk);
  EXPECT_EQ(ExitCodeForFinalState(flame::v1::JOB_STATE_FAILED), ExitCode::kJobFailed);
  EXPECT_EQ(ExitCodeForFinalState(flame::v1::JOB_STATE_CANCELLED), ExitCode::kJobCancelled);
  EXPECT_EQ(ExitCodeForFinalState(flame::v1::JOB_STATE_PAUSED), ExitCode::kJobPaused);
}

TEST(ExitCodeHelp, DocumentsEveryCode) {
  const std::string help = kExitCodeHelp;
  for (int code = 0; code <= ToInt(ExitCode::kInternalError); ++code) {
    EXPECT_NE(help.find(absl::StrCat("  ", code, "  ")), std::string::npos) << code;
  }
}

}  // namespace
}  // namespace flame::client
