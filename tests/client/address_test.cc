#include "client/address.h"

#include <unistd.h>

#include <filesystem>

#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

using ::testing::HasSubstr;

class AddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/address_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = std::filesystem::path(pattern).lexically_normal().string();
  }
  std::string dir_;
};

TEST_F(AddressTest, TheFlagWinsOverTheEnvironmentAndTheFile) {
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/flamed.addr", "grpc=127.0.0.1:3\n").ok());
  EXPECT_EQ(*ResolveCoordinatorAddress({"flag:1", "env:2", dir_, ""}), "flag:1");
  EXPECT_EQ(*ResolveCoordinatorAddress({"", "env:2", dir_, ""}), "env:2");
}

TEST_F(AddressTest, TheAddressFileOfTheDataDirectoryIsReadLast) {
  ASSERT_TRUE(
      WriteFileAtomically(dir_ + "/flamed.addr", "grpc=127.0.0.1:4101\nmetrics=127.0.0.1:9\n")
          .ok());
  EXPECT_EQ(*ResolveCoordinatorAddress({"", "", dir_, ""}), "127.0.0.1:4101");
  EXPECT_EQ(*ResolveCoordinatorAddress({"", "", "", dir_}), "127.0.0.1:4101");
}

TEST_F(AddressTest, TheDataDirectoryFlagWinsOverTheEnvironment) {
  EXPECT_EQ(ResolveDataDirectory({"", "", "/flag", "/env"}), "/flag");
  EXPECT_EQ(ResolveDataDirectory({"", "", "", "/env"}), "/env");
  EXPECT_EQ(ResolveDataDirectory({"", "", "", ""}), DefaultDataDirectory());
}

TEST_F(AddressTest, NoAddressAnywhereIsUnavailableAndSaysWhereItLooked) {
  absl::StatusOr<std::string> address = ResolveCoordinatorAddress({"", "", dir_, ""});
  EXPECT_EQ(address.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(address.status().message(), HasSubstr(dir_ + "/flamed.addr"));
}

TEST(FindAddressLine, FindsTheLineOfTheKey) {
  EXPECT_EQ(*FindAddressLine("grpc=a:1\nmetrics=b:2\n", "metrics"), "b:2");
  EXPECT_EQ(*FindAddressLine("metrics=b:2\r\ngrpc=a:1", "grpc"), "a:1");
  EXPECT_FALSE(FindAddressLine("grpcx=a:1\n", "grpc").ok());
  EXPECT_FALSE(FindAddressLine("grpc=\n", "grpc").ok());
}

}  // namespace
}  // namespace flame::client
