// The whole coordinator in-process, over real gRPC on port 0: flamed.addr, the user API, the
// worker API, streams, metrics over HTTP, the bearer token, and a restart on the same data.
#include "server/daemon.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "flame/v1/coordinator.grpc.pb.h"
#include "flame/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/metrics.h"
#include "tests/server/fake_worker.h"
#include "tests/server/test_util.h"

namespace flame::server::testing {
namespace {

using ::testing::HasSubstr;

// GET http://127.0.0.1:<port>/metrics, the body only.
std::string Scrape(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return "";
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)::write(fd, request.data(), request.size());
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? response : response.substr(body + 4);
}

class DaemonTest : public ::testing::Test {
 protected:
  DaemonTest() : worker_binary_(InstallFakeWorker(dir_.path())) {}

  ~DaemonTest() override {
    // Workers outlive a daemon by design; the test's own must not outlive the test.
    if (daemon_ == nullptr) return;
    for (const flame::v1::Job& job : daemon_->manager().List({})) {
      for (const flame::v1::Attempt& attempt : job.attempts()) {
        for (const flame::v1::RankProcess& rank : attempt.ranks()) {
          if (!rank.exited()) ::kill(-static_cast<pid_t>(rank.pid()), SIGKILL);
        }
      }
    }
  }

  void StartDaemon(const std::string& auth_token = "") {
    daemon_.reset();
    DaemonOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.data_dir = dir_.Join("data");
    options.worker_binary = worker_binary_;
    options.pool = SlotPool{SlotKind::kCpu, 2};
    options.auth_token = auth_token;
    options.stop_grace = absl::Milliseconds(200);
    options.kill_grace = absl::Seconds(2);
    options.supervise_period = absl::Milliseconds(20);
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    auto channel = grpc::CreateChannel(daemon_->grpc_address(), grpc::InsecureChannelCredentials());
    coordinator_ = flame::v1::CoordinatorService::NewStub(channel);
    workers_ = flame::v1::WorkerService::NewStub(channel);
  }

  flame::v1::Job SubmitOk(int ranks) {
    grpc::ClientContext context;
    flame::v1::SubmitJobRequest request;
    *request.mutable_spec() = ValidSpec(dir_.path(), ranks);
    flame::v1::Job job;
    const grpc::Status status = coordinator_->SubmitJob(&context, request, &job);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return job;
  }

  flame::v1::Job GetJob(const std::string& id) {
    grpc::ClientContext context;
    flame::v1::GetJobRequest request;
    request.set_job_id(id);
    flame::v1::Job job;
    EXPECT_TRUE(coordinator_->GetJob(&context, request, &job).ok());
    return job;
  }

  flame::v1::WorkerIdentity Worker(const flame::v1::Job& job, int rank) {
    flame::v1::WorkerIdentity worker;
    worker.set_job_id(job.id());
    worker.set_attempt(job.attempts().rbegin()->number());
    worker.set_rank(rank);
    return worker;
  }

  // Everything a rank says over its life, through the WorkerService.
  void JoinOverGrpc(const flame::v1::Job& job, int rank) {
    grpc::ClientContext context;
    flame::v1::JoinRequest request;
    *request.mutable_worker() = Worker(job, rank);
    flame::v1::JoinResponse response;
    const grpc::Status status = workers_->Join(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.world_size(), job.spec().resources().ranks());
    EXPECT_EQ(response.dump_folder(), job.spec().job().dump_folder());
  }

  void FinishOverGrpc(const flame::v1::Job& job, int rank, flame::v1::FinishReason reason) {
    grpc::ClientContext context;
    flame::v1::FinishRequest request;
    *request.mutable_worker() = Worker(job, rank);
    request.set_reason(reason);
    flame::v1::FinishResponse response;
    ASSERT_TRUE(workers_->Finish(&context, request, &response).ok());
  }

  std::vector<flame::v1::Job> ListJobs() {
    grpc::ClientContext context;
    flame::v1::ListJobsResponse response;
    EXPECT_TRUE(coordinator_->ListJobs(&context, flame::v1::ListJobsRequest(), &response).ok());
    return {response.jobs().begin(), response.jobs().end()};
  }

  TempDir dir_;
  std::string worker_binary_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<flame::v1::CoordinatorService::Stub> coordinator_;
  std::unique_ptr<flame::v1::WorkerService::Stub> workers_;
};

TEST_F(DaemonTest, FlamedAddrNamesTheBoundPortsAndGoesAwayOnShutdown) {
  StartDaemon();
  const std::string addr_file = dir_.Join("data/flamed.addr");
  absl::StatusOr<std::string> contents = ReadFileToString(addr_file);
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_EQ(*contents, absl::StrCat("grpc=", daemon_->grpc_address(),
                                    "\nmetrics=", daemon_->metrics_address(), "\n"));
  EXPECT_THAT(daemon_->grpc_address(), ::testing::StartsWith("127.0.0.1:"));
  EXPECT_NE(daemon_->grpc_address(), "127.0.0.1:0");
  EXPECT_NE(daemon_->metrics_address(), "127.0.0.1:0");
  daemon_->Shutdown();
  EXPECT_FALSE(PathExists(addr_file));
}

TEST_F(DaemonTest, AJobRoundTripsThroughBothServices) {
  StartDaemon();
  const flame::v1::Job submitted = SubmitOk(2);
  ASSERT_EQ(submitted.state(), flame::v1::JOB_STATE_STARTING);
  JoinOverGrpc(submitted, 0);
  JoinOverGrpc(submitted, 1);
  EXPECT_EQ(GetJob(submitted.id()).state(), flame::v1::JOB_STATE_RUNNING);

  {
    grpc::ClientContext context;
    flame::v1::ProgressReport report;
    *report.mutable_worker() = Worker(submitted, 0);
    report.mutable_progress()->set_step(10);
    report.mutable_progress()->set_loss(4.25);
    report.mutable_progress()->set_tokens_per_second(1500);
    report.mutable_progress()->set_max_loss(4.5);
    report.mutable_progress()->set_eval_loss(4.125);
    report.mutable_progress()->set_eval_step(10);
    report.mutable_progress()->set_data_loading_share(7.5);
    report.mutable_progress()->set_skipped_steps(1);
    report.mutable_progress()->set_memory_peak_gib(0.5);
    flame::v1::Directive directive;
    ASSERT_TRUE(workers_->ReportProgress(&context, report, &directive).ok());
    EXPECT_EQ(directive.action(), flame::v1::WORKER_ACTION_CONTINUE);
  }
  const std::string metrics = Scrape(daemon_->metrics().port());
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrCat("flame_job_step{job_id=\"", submitted.id(), "\"} 10")));
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrCat("flame_job_loss{job_id=\"", submitted.id(), "\"} 4.25")));
  EXPECT_THAT(metrics, HasSubstr("flame_jobs{state=\"running\"} 1"));
  const std::string job_label = absl::StrCat("{job_id=\"", submitted.id(), "\"} ");
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("flame_job_max_loss", job_label, "4.5")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("flame_job_eval_loss", job_label, "4.125")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("flame_job_eval_step", job_label, "10")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("flame_job_data_loading_percent", job_label, "7.5")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("flame_job_skipped_steps", job_label, "1")));
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrCat("flame_job_memory_peak_bytes", job_label, "536870912")));
  EXPECT_EQ(GetJob(submitted.id()).history_size(), 1);
  EXPECT_DOUBLE_EQ(GetJob(submitted.id()).history(0).eval_loss(), 4.125);
  EXPECT_DOUBLE_EQ(GetJob(submitted.id()).progress().eval_loss(), 4.125);
  EXPECT_EQ(ListJobs()[0].history_size(), 0);  // lists are summaries

  // A watch started now follows the job to its end.
  grpc::ClientContext watch_context;
  flame::v1::WatchJobRequest watch_request;
  watch_request.set_job_id(submitted.id());
  auto watch = coordinator_->WatchJob(&watch_context, watch_request);
  flame::v1::Job seen;
  ASSERT_TRUE(watch->Read(&seen));
  EXPECT_EQ(seen.state(), flame::v1::JOB_STATE_RUNNING);

  FinishOverGrpc(submitted, 0, flame::v1::FINISH_REASON_COMPLETED);
  FinishOverGrpc(submitted, 1, flame::v1::FINISH_REASON_COMPLETED);
  ReleaseWorkers(dir_.path(), submitted.id(), 1, 0);
  while (watch->Read(&seen)) {
  }
  EXPECT_TRUE(watch->Finish().ok());
  EXPECT_EQ(seen.state(), flame::v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(Scrape(daemon_->metrics().port()), HasSubstr("flame_jobs{state=\"succeeded\"} 1"));

  // The log of rank 1, in two pieces joined by the cursor.
  grpc::ClientContext logs_context;
  flame::v1::StreamLogsRequest logs_request;
  logs_request.set_job_id(submitted.id());
  logs_request.set_rank(1);
  auto logs = coordinator_->StreamLogs(&logs_context, logs_request);
  std::string log;
  flame::v1::LogChunk chunk;
  while (logs->Read(&chunk)) {
    log += chunk.data();
    EXPECT_EQ(chunk.next_offset(), static_cast<int64_t>(log.size()));
  }
  ASSERT_TRUE(logs->Finish().ok());
  EXPECT_EQ(log, *ReadFileToString(seen.attempts(0).ranks(1).log_path()));
  EXPECT_THAT(log, HasSubstr("rank=1 local_rank=1 world=2"));

  grpc::ClientContext tail_context;
  logs_request.set_offset(10);
  auto tail = coordinator_->StreamLogs(&tail_context, logs_request);
  std::string rest;
  while (tail->Read(&chunk)) rest += chunk.data();
  ASSERT_TRUE(tail->Finish().ok());
  EXPECT_EQ(rest, log.substr(10));
}

TEST_F(DaemonTest, BadInputGetsAClearErrorAndLeavesNoJob) {
  StartDaemon();
  grpc::ClientContext context;
  flame::v1::SubmitJobRequest request;
  *request.mutable_spec() = ValidSpec(dir_.path(), 1);
  request.mutable_spec()->mutable_training()->set_steps(-5);
  flame::v1::Job job;
  const grpc::Status status = coordinator_->SubmitJob(&context, request, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("training.steps must be positive (got -5)"));
  EXPECT_TRUE(ListJobs().empty());

  grpc::ClientContext get_context;
  flame::v1::GetJobRequest get;
  get.set_job_id("j-nothere");
  EXPECT_EQ(coordinator_->GetJob(&get_context, get, &job).error_code(),
            grpc::StatusCode::NOT_FOUND);

  grpc::ClientContext logs_context;
  flame::v1::StreamLogsRequest logs_request;
  logs_request.set_job_id(SubmitOk(1).id());
  logs_request.set_rank(3);
  auto logs = coordinator_->StreamLogs(&logs_context, logs_request);
  flame::v1::LogChunk chunk;
  while (logs->Read(&chunk)) {
  }
  EXPECT_EQ(logs->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DaemonTest, AFollowedLogEndsWhenTheJobEndsWithNothingMissing) {
  StartDaemon();
  const flame::v1::Job job = SubmitOk(1);
  grpc::ClientContext context;
  flame::v1::StreamLogsRequest request;
  request.set_job_id(job.id());
  request.set_follow(true);
  auto stream = coordinator_->StreamLogs(&context, request);
  std::string log;
  flame::v1::LogChunk chunk;
  ASSERT_TRUE(stream->Read(&chunk));  // the banner and the environment line, at least
  log += chunk.data();

  // The script never reads directives: the cancel ends it with SIGTERM after the grace period.
  grpc::ClientContext cancel_context;
  flame::v1::CancelJobRequest cancel;
  cancel.set_job_id(job.id());
  flame::v1::Job cancelling;
  ASSERT_TRUE(coordinator_->CancelJob(&cancel_context, cancel, &cancelling).ok());
  EXPECT_EQ(cancelling.state(), flame::v1::JOB_STATE_CANCELLING);
  while (stream->Read(&chunk)) log += chunk.data();
  EXPECT_TRUE(stream->Finish().ok());
  const flame::v1::Job cancelled = GetJob(job.id());
  EXPECT_EQ(cancelled.state(), flame::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(log, *ReadFileToString(cancelled.attempts(0).ranks(0).log_path()));
}

TEST_F(DaemonTest, ChangesNeedTheBearerTokenWhenOneIsSet) {
  StartDaemon("s3cret");
  flame::v1::SubmitJobRequest request;
  *request.mutable_spec() = ValidSpec(dir_.path(), 1);
  flame::v1::Job job;
  {
    grpc::ClientContext context;
    const grpc::Status status = coordinator_->SubmitJob(&context, request, &job);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer wrong");
    EXPECT_EQ(coordinator_->SubmitJob(&context, request, &job).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(ListJobs().empty());  // reads need no token
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer s3cret");
  EXPECT_TRUE(coordinator_->SubmitJob(&context, request, &job).ok());
  EXPECT_EQ(ListJobs().size(), 1u);

  // Worker reports change jobs too: a forged one without the token is refused.
  grpc::ClientContext worker_context;
  flame::v1::FinishRequest finish;
  *finish.mutable_worker() = Worker(job, 0);
  finish.set_reason(flame::v1::FINISH_REASON_ERROR);
  flame::v1::FinishResponse finished;
  EXPECT_EQ(workers_->Finish(&worker_context, finish, &finished).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetJob(job.id()).state(), flame::v1::JOB_STATE_STARTING);
  // The workers flamed starts get the token.
  EXPECT_TRUE(WaitFor([&] {
    return ReadFileToString(job.attempts(0).ranks(0).log_path())
               .value_or("")
               .find("token=s3cret") != std::string::npos;
  }));
}

TEST_F(DaemonTest, ARestartedDaemonShowsEveryJobUnchangedAndKeepsRunningOnes) {
  StartDaemon();
  const flame::v1::Job running = SubmitOk(1);
  JoinOverGrpc(running, 0);
  const flame::v1::Job queued_then_cancelled = SubmitOk(2);
  {
    grpc::ClientContext context;
    flame::v1::CancelJobRequest cancel;
    cancel.set_job_id(queued_then_cancelled.id());
    flame::v1::Job job;
    ASSERT_TRUE(coordinator_->CancelJob(&context, cancel, &job).ok());
    EXPECT_EQ(job.state(), flame::v1::JOB_STATE_CANCELLED);
  }
  const std::vector<flame::v1::Job> before = ListJobs();
  daemon_->Shutdown();  // the worker of `running` keeps running

  StartDaemon();
  const std::vector<flame::v1::Job> after = ListJobs();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].id(), before[i].id());
    EXPECT_EQ(after[i].state(), before[i].state()) << after[i].id();
    EXPECT_EQ(after[i].SerializeAsString(), before[i].SerializeAsString()) << after[i].id();
  }
  // The surviving worker reports to the new daemon and its job completes there.
  const flame::v1::Job reattached = GetJob(running.id());
  EXPECT_EQ(reattached.state(), flame::v1::JOB_STATE_RUNNING);
  FinishOverGrpc(reattached, 0, flame::v1::FINISH_REASON_COMPLETED);
  ReleaseWorkers(dir_.path(), running.id(), 1, 0);
  EXPECT_TRUE(
      WaitFor([&] { return GetJob(running.id()).state() == flame::v1::JOB_STATE_SUCCEEDED; }));
}

}  // namespace
}  // namespace flame::server::testing
