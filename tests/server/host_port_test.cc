#include "server/host_port.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/host_resources.h"

namespace flame::server {
namespace {

TEST(ParseHostPort, SplitsHostAndPort) {
  absl::StatusOr<HostPort> parsed = ParseHostPort("127.0.0.1:7470", "listen");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->host, "127.0.0.1");
  EXPECT_EQ(parsed->port, 7470);
  parsed = ParseHostPort("[::1]:0", "listen");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->host, "[::1]");
  EXPECT_EQ(parsed->port, 0);
}

TEST(ParseHostPort, RefusesMalformedAddressesNamingTheFlag) {
  for (const char* bad : {"7470", ":7470", "host:", "host:70000", "host:-1", "host:http"}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(bad, "metrics_listen");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), ::testing::HasSubstr("--metrics_listen")) << bad;
  }
}

TEST(DialableHost, TurnsWildcardsIntoLoopback) {
  EXPECT_EQ(DialableHost("0.0.0.0"), "127.0.0.1");
  EXPECT_EQ(DialableHost("[::]"), "[::1]");
  EXPECT_EQ(DialableHost("10.1.2.3"), "10.1.2.3");
}

TEST(DetectSlotPool, UsesGpusWhenThereAreAnyElseCpuSlots) {
  SlotPool pool = DetectSlotPool(/*gpus=*/2, /*cpu_slots=*/8);
  EXPECT_EQ(pool.kind, SlotKind::kGpu);
  EXPECT_EQ(pool.count, 2);
  pool = DetectSlotPool(/*gpus=*/0, /*cpu_slots=*/8);
  EXPECT_EQ(pool.kind, SlotKind::kCpu);
  EXPECT_EQ(pool.count, 8);
  EXPECT_GE(DetectSlotPool(0, 0).count, 1);  // one per online CPU
}

}  // namespace
}  // namespace flame::server
