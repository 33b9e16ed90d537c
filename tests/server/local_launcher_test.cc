// LocalLauncher with real processes: environment, logs, exit codes, signals, sessions, and
// finding a worker it did not start (as after a flamed restart).
#include "server/local_launcher.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/fake_worker.h"
#include "tests/server/test_util.h"

namespace flame::server::testing {
namespace {

using ::testing::HasSubstr;

class LocalLauncherTest : public ::testing::Test {
 protected:
  LocalLauncherTest() : launcher_(InstallFakeWorker(dir_.path())) {}

  LaunchRequest Request(const std::string& job_id, int attempt, int ranks) {
    LaunchRequest request;
    request.job_id = job_id;
    request.attempt = attempt;
    request.coordinator_address = "127.0.0.1:7470";
    for (int r = 0; r < ranks; ++r) request.slots.push_back(r);
    request.log_dir = dir_.Join("jobs/" + job_id + "/logs");
    return request;
  }

  // Waits for the rank's process to end and returns its exit code.
  int ExitCodeOf(const LaunchedRank& rank, const std::string& job_id, int attempt) {
    ProcessState state;
    EXPECT_TRUE(WaitFor([&] {
      state = launcher_.Poll(rank.pid, job_id, attempt);
      return state.kind == ProcessState::Kind::kExited;
    })) << "pid "
        << rank.pid << " did not exit";
    return state.exit_code;
  }

  std::string Log(const LaunchedRank& rank) {
    absl::StatusOr<std::string> log = ReadFileToString(rank.log_path);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? *log : "";
  }

  TempDir dir_;
  LocalLauncher launcher_;
};

TEST_F(LocalLauncherTest, StartsOneWorkerPerRankWithTheRendezvousEnvironment) {
  absl::StatusOr<LaunchResult> result = launcher_.Launch(Request("j-env", 1, 2));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->ranks.size(), 2u);
  EXPECT_EQ(result->master_addr, "127.0.0.1");
  EXPECT_GT(result->master_port, 0);
  ReleaseWorkers(dir_.path(), "j-env", 1, 0);
  for (const LaunchedRank& rank : result->ranks) {
    EXPECT_EQ(ExitCodeOf(rank, "j-env", 1), 0);
    EXPECT_EQ(rank.log_path, dir_.Join(absl::StrCat("jobs/j-env/logs/rank-", rank.rank, ".log")));
    const std::string log = Log(rank);
    EXPECT_THAT(log, HasSubstr("==== flame job j-env attempt 1 rank " + std::to_string(rank.rank) +
                               " of 2"));
    EXPECT_THAT(log, HasSubstr(absl::StrCat("rank=", rank.rank, " local_rank=", rank.rank,
                                            " world=2 job=j-env attempt=1 "
                                            "coordinator=127.0.0.1:7470 master=127.0.0.1:",
                                            result->master_port, " nvls=0 cuda=unset")));
    EXPECT_THAT(log, HasSubstr("local_world=2 token=unset"));
    EXPECT_THAT(log, HasSubstr("a line on stderr"));
  }
}

TEST_F(LocalLauncherTest, PassesTheBearerTokenAndDropsInheritedWorkerVariables) {
  ::setenv("RANK", "77", 1);  // flamed's own environment must not leak a rank into workers
  LaunchRequest request = Request("j-token", 1, 1);
  request.auth_token = "s3cret";
  absl::StatusOr<LaunchResult> result = launcher_.Launch(request);
  ::unsetenv("RANK");
  ASSERT_TRUE(result.ok()) << result.status();
  ReleaseWorkers(dir_.path(), "j-token", 1, 0);
  EXPECT_EQ(ExitCodeOf(result->ranks[0], "j-token", 1), 0);
  EXPECT_THAT(Log(result->ranks[0]), HasSubstr("rank=0 "));
  EXPECT_THAT(Log(result->ranks[0]), HasSubstr("token=s3cret"));
}

TEST_F(LocalLauncherTest, GpuSlotsBecomeTheVisibleDevicesOfEveryRank) {
  LaunchRequest request = Request("j-gpu", 1, 2);
  request.gpu_slots = true;
  request.slots = {2, 3};
  absl::StatusOr<LaunchResult> result = launcher_.Launch(request);
  ASSERT_TRUE(result.ok()) << result.status();
  ReleaseWorkers(dir_.path(), "j-gpu", 1, 0);
  for (const LaunchedRank& rank : result->ranks) {
    EXPECT_EQ(ExitCodeOf(rank, "j-gpu", 1), 0);
    EXPECT_THAT(Log(rank), HasSubstr("cuda=2,3"));
  }
}

TEST_F(LocalLauncherTest, ReportsTheExitCode) {
  absl::StatusOr<LaunchResult> result = launcher_.Launch(Request("j-code", 1, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  ReleaseWorkers(dir_.path(), "j-code", 1, 3);
  EXPECT_EQ(ExitCodeOf(result->ranks[0], "j-code", 1), 3);
}

TEST_F(LocalLauncherTest, EachWorkerLeadsItsOwnSessionAndASignalReachesIt) {
  absl::StatusOr<LaunchResult> result = launcher_.Launch(Request("j-sig", 1, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  const LaunchedRank& rank = result->ranks[0];
  EXPECT_EQ(::getsid(static_cast<pid_t>(rank.pid)), static_cast<pid_t>(rank.pid));
  EXPECT_NE(::getsid(0), static_cast<pid_t>(rank.pid));
  EXPECT_EQ(launcher_.Poll(rank.pid, "j-sig", 1).kind, ProcessState::Kind::kRunning);
  launcher_.Signal(rank.pid, "j-sig", 1, SIGTERM);
  EXPECT_EQ(ExitCodeOf(rank, "j-sig", 1), 128 + SIGTERM);
}

TEST_F(LocalLauncherTest, EveryAttemptIsAppendedToTheSameLogBehindItsBanner) {
  for (int attempt = 1; attempt <= 2; ++attempt) {
    absl::StatusOr<LaunchResult> result = launcher_.Launch(Request("j-log", attempt, 1));
    ASSERT_TRUE(result.ok()) << result.status();
    ReleaseWorkers(dir_.path(), "j-log", attempt, 0);
    EXPECT_EQ(ExitCodeOf(result->ranks[0], "j-log", attempt), 0);
  }
  const std::string log = *ReadFileToString(dir_.Join("jobs/j-log/logs/rank-0.log"));
  EXPECT_THAT(log, HasSubstr("attempt 1 rank 0"));
  EXPECT_THAT(log, HasSubstr("attempt 2 rank 0"));
  EXPECT_LT(log.find("attempt=1"), log.find("attempt 2 rank 0"));  // in order, not overwritten
}

TEST_F(LocalLauncherTest, AMissingWorkerBinaryIsAClearError) {
  LocalLauncher missing(dir_.Join("bin/no-such-worker"));
  absl::StatusOr<LaunchResult> result = missing.Launch(Request("j-none", 1, 1));
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("no-such-worker"));
  EXPECT_THAT(result.status().message(), HasSubstr("--worker_binary"));
}

TEST_F(LocalLauncherTest, APidThatIsNotOurWorkerCountsAsExited) {
  const ProcessState state = launcher_.Poll(::getpid(), "j-x", 1);
  EXPECT_EQ(state.kind, ProcessState::Kind::kExited);
  EXPECT_EQ(state.exit_code, -1);
}

TEST_F(LocalLauncherTest, FindsAWorkerItDidNotStartByItsJobAndAttempt) {
  // Start a worker the way an earlier flamed would have: not our child (its parent exits).
  const std::string pid_file = dir_.Join("orphan.pid");
  const std::string command =
      absl::StrCat("FLAME_JOB_ID=j-orphan FLAME_ATTEMPT=4 sh -c '", launcher_.worker_binary(),
                   " >/dev/null 2>&1 </dev/null & echo $! > ", pid_file, "'");
  ASSERT_EQ(std::system(command.c_str()), 0);
  int64_t pid = 0;
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<std::string> text = ReadFileToString(pid_file);
    return text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) && pid > 0;
  }));
  // Until the background shell has exec'd the worker, the pid is still a plain `sh`.
  EXPECT_TRUE(WaitFor(
      [&] { return launcher_.Poll(pid, "j-orphan", 4).kind == ProcessState::Kind::kRunning; }));
  EXPECT_EQ(launcher_.Poll(pid, "j-orphan", 5).kind, ProcessState::Kind::kExited);
  EXPECT_EQ(launcher_.Poll(pid, "j-other", 4).kind, ProcessState::Kind::kExited);
  ReleaseWorkers(dir_.path(), "j-orphan", 4, 0);
  EXPECT_TRUE(WaitFor([&] {
    const ProcessState state = launcher_.Poll(pid, "j-orphan", 4);
    return state.kind == ProcessState::Kind::kExited && state.exit_code == -1;
  }));
}

TEST_F(LocalLauncherTest, NeverSignalsAProcessThatIsNotItsWorker) {
  // A pid recorded by an earlier flamed may now belong to anything, e.g. this `sleep`.
  const std::string pid_file = dir_.Join("sleep.pid");
  ASSERT_EQ(std::system(absl::StrCat("sh -c 'sleep 30 >/dev/null 2>&1 </dev/null & echo $! > ",
                                     pid_file, "'")
                            .c_str()),
            0);
  int64_t pid = 0;
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<std::string> text = ReadFileToString(pid_file);
    return text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) && pid > 0;
  }));
  launcher_.Signal(pid, "j-gone", 1, SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(::kill(static_cast<pid_t>(pid), 0), 0) << "an unrelated process was killed";
  ::kill(static_cast<pid_t>(pid), SIGKILL);
}

TEST(PickFreeTcpPort, ReturnsAPortThatCanBeBound) {
  absl::StatusOr<int> port = PickFreeTcpPort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_FALSE(PickFreeTcpPort("not-an-address").ok());
}

TEST(DefaultWorkerBinary, IsFlameWorkerNextToTheRunningProgram) {
  const std::string path = DefaultWorkerBinary();
  char self[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  const std::string dir = std::string(self).substr(0, std::string(self).rfind('/'));
  EXPECT_EQ(path, dir + "/flame-worker");
}

}  // namespace
}  // namespace flame::server::testing
