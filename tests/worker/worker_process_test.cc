// The flame-worker executable against a scripted coordinator: the whole rank as flamed sees it
// (join, progress, checkpoint commits, finish, exit codes), one and two ranks, resume, cancel,
// staleness and a training error.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/job_spec.h"
#include "tests/worker/fake_coordinator.h"
#include "tests/worker/test_util.h"

namespace flame::worker {
namespace {

using std::chrono::milliseconds;
using testing::FakeCoordinator;
using testing::TempDir;

flame::v1::JobSpec DemoSpec(int64_t steps) {
  flame::v1::JobSpec spec;
  spec.mutable_model()->set_config(testing::SourcePath("configs/models/gla_tiny.json"));
  spec.mutable_model()->set_tokenizer_path(testing::DemoData("fortunes.model"));
  spec.mutable_training()->set_dataset(testing::DemoData("fortunes.jsonl"));
  spec.mutable_training()->set_batch_size(2);
  spec.mutable_training()->set_seq_len(64);
  spec.mutable_training()->set_steps(steps);
  spec.mutable_optimizer()->set_lr(5e-3);
  spec.mutable_lr_scheduler()->set_warmup_steps(2);
  spec.mutable_checkpoint()->set_interval(6);
  spec.mutable_metrics()->set_log_freq(5);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// One flame-worker process with the launcher's environment; output goes to `log`.
class WorkerProcess {
 public:
  WorkerProcess(const std::string& coordinator, int rank, int world_size, int master_port,
                std::string log)
      : log_(std::move(log)) {
    std::vector<std::string> env = {"PATH=/usr/bin:/bin",
                                    "FLAME_COORDINATOR=" + coordinator,
                                    "FLAME_JOB_ID=job-7",
                                    "FLAME_ATTEMPT=1",
                                    "RANK=" + std::to_string(rank),
                                    "WORLD_SIZE=" + std::to_string(world_size),
                                    "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + std::to_string(master_port),
                                    "OMP_NUM_THREADS=1"};
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> envp;
      for (std::string& entry : env) envp.push_back(entry.data());
      envp.push_back(nullptr);
      char* argv[] = {const_cast<char*>(FLAME_WORKER_BINARY), nullptr};
      ::execve(FLAME_WORKER_BINARY, argv, envp.data());
      ::_exit(127);
    }
  }

  // The exit code, or -1 if it had to be killed after `timeout`.
  int Wait(std::chrono::seconds timeout = std::chrono::seconds(120)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        return -1;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // SIGKILL, as the kernel's OOM killer or a node failure would: no step is finished, nothing is
  // saved, no Finish is sent.
  void Kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

std::vector<int64_t> ProgressSteps(FakeCoordinator& fake) {
  std::vector<int64_t> steps;
  for (const auto& report : fake.progress()) steps.push_back(report.progress().step());
  return steps;
}

TEST(WorkerProcess, TrainsReportsCommitsCheckpointsAndResumesFromThem) {
  TempDir dir;
  {
    FakeCoordinator fake(DemoSpec(12), 1, dir.path() + "/dump");
    fake.Start();
    WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/rank0.log");
    ASSERT_EQ(worker.Wait(), 0) << worker.Log();
    EXPECT_EQ(fake.joins().size(), 1u);
    EXPECT_EQ(ProgressSteps(fake), (std::vector<int64_t>{1, 5, 10, 12}));
    const auto progress = fake.progress();
    EXPECT_EQ(progress.back().resumed_from_step(), 0);
    EXPECT_LT(progress.back().progress().loss(), progress.front().progress().loss());
    EXPECT_EQ(progress.back().progress().tokens(), 12 * 2 * 64);
    // The facts beyond loss and tokens travel too (tests/worker/trainer_metrics_test.cc checks
    // their values).
    EXPECT_GT(progress.back().progress().tflops(), 0);
    EXPECT_GT(progress.back().progress().step_seconds(), 0);
    EXPECT_GT(progress.back().progress().memory_peak_gib(), 0);
    EXPECT_GE(progress.back().progress().max_loss(), progress.back().progress().loss());
    ASSERT_EQ(fake.commits().size(), 2u);
    EXPECT_EQ(fake.commits()[0].checkpoint().step(), 6);
    EXPECT_EQ(fake.commits()[1].checkpoint().path(), dir.path() + "/dump/checkpoint/step-12");
    ASSERT_EQ(fake.finishes().size(), 1u);
    EXPECT_EQ(fake.finishes()[0].reason(), flame::v1::FINISH_REASON_COMPLETED);
    EXPECT_EQ(fake.finishes()[0].step(), 12);
    EXPECT_NE(worker.Log().find("step:       12"), std::string::npos) << worker.Log();
  }
  // A second attempt with a longer schedule continues from step 12.
  FakeCoordinator fake(DemoSpec(16), 1, dir.path() + "/dump");
  fake.Start();
  WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/rank0-again.log");
  ASSERT_EQ(worker.Wait(), 0) << worker.Log();
  EXPECT_EQ(ProgressSteps(fake), (std::vector<int64_t>{15, 16}));
  EXPECT_EQ(fake.progress().front().resumed_from_step(), 12);
  ASSERT_EQ(fake.finishes().size(), 1u);
  EXPECT_EQ(fake.finishes()[0].step(), 16);
}

// Loss of every reported step.
std::map<int64_t, double> ReportedLosses(FakeCoordinator& fake) {
  std::map<int64_t, double> losses;
  for (const auto& report : fake.progress()) {
    losses[report.progress().step()] = report.progress().loss();
  }
  return losses;
}

// The resume proof with a real process: SIGKILL a worker mid-run (packed varlen rows, gradient
// accumulation), start a new one on the same dump folder, and every step it reports has the
// uninterrupted run's loss.
TEST(WorkerProcess, AKilledRunResumesWithTheUninterruptedLosses) {
  flame::v1::JobSpec spec = DemoSpec(30);
  spec.mutable_training()->set_varlen(true);
  spec.mutable_training()->set_batch_size(1);
  spec.mutable_training()->set_seq_len(128);
  spec.mutable_training()->set_context_len(48);
  spec.mutable_training()->set_gradient_accumulation_steps(2);
  spec.mutable_metrics()->set_log_freq(1);
  TempDir dir;
  std::map<int64_t, double> uninterrupted;
  {
    FakeCoordinator fake(spec, 1, dir.path() + "/whole");
    fake.Start();
    WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/whole.log");
    ASSERT_EQ(worker.Wait(), 0) << worker.Log();
    uninterrupted = ReportedLosses(fake);
    ASSERT_EQ(uninterrupted.size(), 30u);
  }
  {
    FakeCoordinator fake(spec, 1, dir.path() + "/killed");
    fake.Start();
    WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/killed.log");
    ASSERT_TRUE(fake.WaitFor([&] { return !fake.commits().empty(); }, milliseconds(60000)))
        << worker.Log();
    worker.Kill();
    EXPECT_TRUE(fake.finishes().empty());
  }
  FakeCoordinator fake(spec, 1, dir.path() + "/killed");
  fake.Start();
  WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/resumed.log");
  ASSERT_EQ(worker.Wait(), 0) << worker.Log();
  ASSERT_FALSE(fake.progress().empty()) << "the killed run had already finished: " << worker.Log();
  const int64_t resumed_from = fake.progress().front().resumed_from_step();
  EXPECT_GT(resumed_from, 0) << worker.Log();
  const std::map<int64_t, double> resumed = ReportedLosses(fake);
  ASSERT_EQ(static_cast<int64_t>(resumed.size()), 30 - resumed_from);
  for (const auto& [step, loss] : resumed) {
    const double expected = uninterrupted.at(step);
    EXPECT_LE(std::abs(loss - expected), 1e-6 * std::abs(expected))
        << "step " << step << ": resumed " << loss << " vs uninterrupted " << expected;
  }
}

TEST(WorkerProcess, TwoRanksTrainTogetherAndOnlyRankZeroReports) {
  TempDir dir;
  FakeCoordinator fake(DemoSpec(6), 2, dir.path() + "/dump");
  fake.Start();
  const int port = FreePort();
  WorkerProcess rank0(fake.address(), 0, 2, port, dir.path() + "/rank0.log");
  WorkerProcess rank1(fake.address(), 1, 2, port, dir.path() + "/rank1.log");
  ASSERT_EQ(rank1.Wait(), 0) << rank1.Log();
  ASSERT_EQ(rank0.Wait(), 0) << rank0.Log();
  EXPECT_EQ(fake.joins().size(), 2u);
  ASSERT_FALSE(fake.progress().empty());
  for (const auto& report : fake.progress()) EXPECT_EQ(report.worker().rank(), 0);
  EXPECT_EQ(fake.progress().back().progress().tokens(), 6 * 2 * 2 * 64);
  ASSERT_EQ(fake.finishes().size(), 2u);
  for (const auto& finish : fake.finishes()) {
    EXPECT_EQ(finish.reason(), flame::v1::FINISH_REASON_COMPLETED);
    EXPECT_EQ(finish.step(), 6);
  }
}

TEST(WorkerProcess, StopsAfterTheCurrentStepWhenCancelled) {
  TempDir dir;
  flame::v1::JobSpec spec = DemoSpec(100000);
  spec.mutable_metrics()->set_log_freq(1);
  FakeCoordinator fake(spec, 1, dir.path() + "/dump");
  fake.Start();
  WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/rank0.log");
  ASSERT_TRUE(fake.WaitFor([&] { return !fake.progress().empty(); }, milliseconds(60000)))
      << worker.Log();
  fake.set_action(flame::v1::WORKER_ACTION_STOP);
  ASSERT_EQ(worker.Wait(), 0) << worker.Log();
  ASSERT_EQ(fake.finishes().size(), 1u);
  EXPECT_EQ(fake.finishes()[0].reason(), flame::v1::FINISH_REASON_STOPPED);
  EXPECT_LT(fake.finishes()[0].step(), 100000);
  EXPECT_EQ(fake.progress().back().progress().step(), fake.finishes()[0].step());
}

TEST(WorkerProcess, ExitsWithCodeThreeWhenItsAttemptIsStale) {
  TempDir dir;
  FakeCoordinator fake(DemoSpec(6), 1, dir.path() + "/dump");
  fake.Start();
  fake.set_stale(true);
  WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/rank0.log");
  EXPECT_EQ(worker.Wait(), 3) << worker.Log();
  EXPECT_TRUE(fake.finishes().empty());
}

TEST(WorkerProcess, TrainsWithAHuggingFaceTokenizerFolder) {
  TempDir dir;
  flame::v1::JobSpec spec = DemoSpec(5);
  spec.mutable_model()->set_tokenizer_path(testing::DemoData("fortunes-llama3"));
  FakeCoordinator fake(spec, 1, dir.path() + "/dump");
  fake.Start();
  WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/rank0.log");
  ASSERT_EQ(worker.Wait(), 0) << worker.Log();
  ASSERT_EQ(fake.finishes().size(), 1u);
  EXPECT_EQ(fake.finishes()[0].reason(), flame::v1::FINISH_REASON_COMPLETED);
  EXPECT_EQ(fake.progress().back().progress().tokens(), 5 * 2 * 64);
}

TEST(WorkerProcess, RefusesAnUnsupportedTokenizerJsonByName) {
  TempDir dir;
  const std::string tokenizer = dir.path() + "/tokenizer.json";
  std::ofstream(tokenizer) << R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})";
  flame::v1::JobSpec spec = DemoSpec(5);
  spec.mutable_model()->set_tokenizer_path(tokenizer);
  FakeCoordinator fake(spec, 1, dir.path() + "/dump");
  fake.Start();
  WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/rank0.log");
  EXPECT_EQ(worker.Wait(), 1) << worker.Log();
  ASSERT_EQ(fake.finishes().size(), 1u);
  EXPECT_NE(fake.finishes()[0].message().find("\"WordPiece\" is not supported"),
            std::string::npos)
      << fake.finishes()[0].message();
}

TEST(WorkerProcess, ReportsATrainingErrorThroughFinishAndExitsNonZero) {
  TempDir dir;
  flame::v1::JobSpec spec = DemoSpec(6);
  spec.mutable_training()->set_dataset(dir.path() + "/no-such-data.jsonl");
  FakeCoordinator fake(spec, 1, dir.path() + "/dump");
  fake.Start();
  WorkerProcess worker(fake.address(), 0, 1, 0, dir.path() + "/rank0.log");
  EXPECT_EQ(worker.Wait(), 1) << worker.Log();
  ASSERT_EQ(fake.finishes().size(), 1u);
  EXPECT_EQ(fake.finishes()[0].reason(), flame::v1::FINISH_REASON_ERROR);
  EXPECT_NE(fake.finishes()[0].message().find("no-such-data.jsonl"), std::string::npos)
      << fake.finishes()[0].message();
}

}  // namespace
}  // namespace flame::worker
