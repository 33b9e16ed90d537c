#include "client/spec_fields.h"

#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(SpecFields, EveryKeyComesFromTheJobSpecProto) {
  const std::vector<std::string> keys = AllSpecKeys();
  EXPECT_THAT(keys, Contains("training.steps"));
  EXPECT_THAT(keys, Contains("lr_scheduler.warmup_steps"));
  EXPECT_THAT(keys, Contains("resources.ranks"));
  EXPECT_THAT(keys, Contains("job.dump_folder"));
  for (const std::string& key : keys) {
    const std::vector<std::string> parts = absl::StrSplit(key, '.');
    ASSERT_EQ(parts.size(), 2u) << key;
    EXPECT_TRUE(FindSpecKey(parts[0], parts[1]).ok()) << key;
  }
}

TEST(SpecFields, NoSupportedKeyIsListedAsNotSupportedYet) {
  for (const std::string& key : AllSpecKeys()) {
    const std::vector<std::string> parts = absl::StrSplit(key, '.');
    EXPECT_FALSE(IsUnsupportedFlameKey(parts[0], parts[1])) << key;
  }
  // A flame key that JobSpec lacks is refused as unsupported, not as a typo.
  EXPECT_THAT(FindSpecKey("training", "tensor_parallel_degree").status().message(),
              HasSubstr("is a flame option that is not supported yet"));
  EXPECT_THAT(FindSpecKey("experimental", "context_parallel_degree").status().message(),
              HasSubstr("is a flame option that is not supported yet"));
  EXPECT_THAT(FindSpecKey("profiling", "enable_profiling").status().message(),
              HasSubstr("is a flame option that is not supported yet"));
}

TEST(SpecFields, ExpectedTypesFollowTheProtoFieldTypes) {
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("training", "steps")), "an integer");
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("resources", "ranks")), "an integer");
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("optimizer", "lr")), "a number");
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("training", "varlen")), "a boolean");
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("model", "config")), "a string");
}

TEST(SpecFields, OnlyTheFourPathKeysArePaths) {
  EXPECT_TRUE(IsPathKey(*FindSpecKey("model", "config")));
  EXPECT_TRUE(IsPathKey(*FindSpecKey("model", "tokenizer_path")));
  EXPECT_TRUE(IsPathKey(*FindSpecKey("training", "dataset")));
  EXPECT_TRUE(IsPathKey(*FindSpecKey("job", "dump_folder")));
  EXPECT_FALSE(IsPathKey(*FindSpecKey("checkpoint", "folder")));  // relative to dump_folder
  EXPECT_FALSE(IsPathKey(*FindSpecKey("model", "name")));
}

TEST(SpecFields, NonFiniteNumbersAreRefused) {
  flame::v1::JobSpec spec;
  const SpecKey lr = *FindSpecKey("optimizer", "lr");
  EXPECT_THAT(
      SetSpecValue(lr, SpecValue(std::numeric_limits<double>::infinity()), "/", &spec).message(),
      HasSubstr("optimizer.lr must be a finite number"));
  EXPECT_FALSE(spec.optimizer().has_lr());
}

TEST(SpecFields, AnIntegerIsAcceptedWhereANumberIsExpected) {
  flame::v1::JobSpec spec;
  ASSERT_TRUE(
      SetSpecValue(*FindSpecKey("optimizer", "lr"), SpecValue(int64_t{2}), "/", &spec).ok());
  EXPECT_DOUBLE_EQ(spec.optimizer().lr(), 2.0);
}

}  // namespace
}  // namespace flame::client
