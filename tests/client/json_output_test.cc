#include "client/json_output.h"

#include "flame/v1/coordinator.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ToJson, UsesProtoFieldNamesEnumNamesAndStringInt64s) {
  flame::v1::Job job;
  job.set_id("j-1");
  job.set_state(flame::v1::JOB_STATE_RUNNING);
  job.mutable_progress()->set_step(40);
  job.mutable_progress()->set_total_steps(100);
  const std::string json = *ToJson(job, /*one_line=*/true);
  EXPECT_THAT(json, HasSubstr("\"id\":\"j-1\""));
  EXPECT_THAT(json, HasSubstr("\"state\":\"JOB_STATE_RUNNING\""));
  EXPECT_THAT(json, HasSubstr("\"total_steps\":\"100\""));
  EXPECT_THAT(json, HasSubstr("\"step\":\"40\""));
  EXPECT_THAT(json, Not(HasSubstr("\n")));
}

TEST(ToJson, PrintsFieldsAtTheirDefaultSoThatScriptsFindEveryKey) {
  flame::v1::Job job;
  job.set_id("j-2");
  const std::string json = *ToJson(job, /*one_line=*/true);
  EXPECT_THAT(json, HasSubstr("\"state\":\"JOB_STATE_UNSPECIFIED\""));
  EXPECT_THAT(json, HasSubstr("\"message\":\"\""));
  EXPECT_THAT(json, HasSubstr("\"attempts\":[]"));
}

TEST(ToJson, AListIsAnObjectWithAJobsArray) {
  flame::v1::ListJobsResponse response;
  response.add_jobs()->set_id("a");
  response.add_jobs()->set_id("b");
  const std::string json = *ToJson(response, /*one_line=*/false);
  EXPECT_THAT(json, HasSubstr("\"jobs\": ["));
  EXPECT_NE(json.back(), '\n');
}

}  // namespace
}  // namespace flame::client
