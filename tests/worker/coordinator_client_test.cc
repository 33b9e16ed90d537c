// The worker's RPC client against a scripted in-process WorkerService.
#include "worker/rpc/coordinator_client.h"

#include <gtest/gtest.h>

#include <map>

#include "common/job_spec.h"
#include "tests/worker/fake_coordinator.h"

namespace flame::worker {
namespace {

using std::chrono::milliseconds;
using testing::FakeCoordinator;

flame::v1::JobSpec ResolvedSpec() {
  flame::v1::JobSpec spec;
  spec.set_name("unit");
  spec.mutable_model()->set_config("/m.json");
  spec.mutable_training()->set_steps(123);
  spec.mutable_training()->set_dataset("/a.jsonl,/b.jsonl");
  ApplyJobSpecDefaults(&spec);
  return spec;
}

class CoordinatorClientTest : public ::testing::Test {
 protected:
  CoordinatorClientTest() : fake_(ResolvedSpec(), 2, "/abs/dump") { fake_.Start(); }

  std::unique_ptr<CoordinatorClient> Connect(int32_t rank = 0) {
    WorkerIdentity id;
    id.coordinator = fake_.address();
    id.job_id = "job-1";
    id.attempt = 3;
    id.rank = rank;
    id.world_size = 2;
    id.token = token_;
    ClientOptions options;
    options.initial_backoff = milliseconds(5);
    options.max_backoff = milliseconds(40);
    options.heartbeat_interval = milliseconds(30);
    options.rpc_timeout = milliseconds(2000);
    options.join_deadline = milliseconds(5000);
    options.finish_deadline = milliseconds(finish_deadline_ms_);
    return CoordinatorClient::Create(id, options);
  }

  FakeCoordinator fake_;
  std::string token_;
  int finish_deadline_ms_ = 5000;
};

TEST_F(CoordinatorClientTest, JoinReturnsTheResolvedSpecAsATrainConfig) {
  token_ = "s3cret";
  fake_.set_token("s3cret");
  std::unique_ptr<CoordinatorClient> client = Connect(1);
  const absl::StatusOr<JoinResult> joined = client->Join(4242, "host-a");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->world_size, 2);
  EXPECT_EQ(joined->dump_folder, "/abs/dump");
  EXPECT_EQ(joined->config.dump_folder, "/abs/dump");
  EXPECT_EQ(joined->spec_hash, JobSpecHash(ResolvedSpec()));
  EXPECT_EQ(joined->config.spec_hash, joined->spec_hash);
  EXPECT_EQ(joined->config.training.steps, 123);
  EXPECT_EQ(joined->config.training.dataset, (std::vector<std::string>{"/a.jsonl", "/b.jsonl"}));
  ASSERT_EQ(fake_.joins().size(), 1u);
  const flame::v1::JoinRequest request = fake_.joins()[0];
  EXPECT_EQ(request.worker().job_id(), "job-1");
  EXPECT_EQ(request.worker().attempt(), 3);
  EXPECT_EQ(request.worker().rank(), 1);
  EXPECT_EQ(request.pid(), 4242);
  EXPECT_EQ(request.hostname(), "host-a");
}

TEST_F(CoordinatorClientTest, JoinKeepsTryingWhileTheCoordinatorIsUnavailable) {
  fake_.FailNextCalls(3, grpc::StatusCode::UNAVAILABLE);
  std::unique_ptr<CoordinatorClient> client = Connect();
  ASSERT_TRUE(client->Join(1, "h").ok());
  EXPECT_EQ(fake_.failed_calls(), 3);
}

TEST_F(CoordinatorClientTest, JoinOfAStaleAttemptFailsWithFailedPrecondition) {
  fake_.set_stale(true);
  std::unique_ptr<CoordinatorClient> client = Connect();
  const absl::StatusOr<JoinResult> joined = client->Join(1, "h");
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client->stale());
  // A missing token is refused for good, not retried.
  fake_.set_stale(false);
  fake_.set_token("needed");
  EXPECT_EQ(Connect()->Join(1, "h").status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(CoordinatorClientTest, HeartbeatsCarryTheStepAndBringTheDirective) {
  std::unique_ptr<CoordinatorClient> client = Connect();
  ASSERT_TRUE(client->Join(1, "h").ok());
  client->StartHeartbeats();
  EXPECT_EQ(client->Current(7), Directive::kContinue);
  ASSERT_TRUE(fake_.WaitFor(
      [&] {
        const auto beats = fake_.heartbeats();
        return !beats.empty() && beats.back().step() == 7;
      },
      milliseconds(3000)));
  fake_.set_action(flame::v1::WORKER_ACTION_CHECKPOINT_STOP);
  ASSERT_TRUE(fake_.WaitFor([&] { return client->Current(8) == Directive::kCheckpointStop; },
                            milliseconds(3000)));
  // Directives only escalate: a later CONTINUE does not undo the pause.
  fake_.set_action(flame::v1::WORKER_ACTION_CONTINUE);
  const size_t beats = fake_.heartbeats().size();
  ASSERT_TRUE(
      fake_.WaitFor([&] { return fake_.heartbeats().size() > beats + 2; }, milliseconds(3000)));
  EXPECT_EQ(client->Current(9), Directive::kCheckpointStop);
}

TEST_F(CoordinatorClientTest, BuffersReportsWhileUnavailableAndDeliversThemInOrder) {
  std::unique_ptr<CoordinatorClient> client = Connect();
  ASSERT_TRUE(client->Join(1, "h").ok());
  fake_.FailNextCalls(6, grpc::StatusCode::UNAVAILABLE);
  for (int64_t step : {1, 10, 20}) {
    ProgressUpdate p;
    p.step = step;
    p.loss = 8.0 - static_cast<double>(step) / 10;
    p.resumed_from_step = 0;
    client->ReportProgress(p);
  }
  CheckpointInfo checkpoint;
  checkpoint.step = 20;
  checkpoint.path = "/abs/dump/checkpoint/step-20";
  checkpoint.bytes = 99;
  checkpoint.checksum = "0badf00d";
  client->CommitCheckpoint(checkpoint);
  ASSERT_TRUE(client->Finish(FinishReason::kCompleted, "", 20).ok());
  EXPECT_EQ(fake_.failed_calls(), 6);
  const std::vector<flame::v1::ProgressReport> progress = fake_.progress();
  ASSERT_EQ(progress.size(), 3u);
  EXPECT_EQ(progress[0].progress().step(), 1);
  EXPECT_EQ(progress[2].progress().step(), 20);
  EXPECT_DOUBLE_EQ(progress[2].progress().loss(), 6.0);
  EXPECT_EQ(progress[2].worker().attempt(), 3);
  ASSERT_EQ(fake_.commits().size(), 1u);
  EXPECT_EQ(fake_.commits()[0].checkpoint().path(), checkpoint.path);
  EXPECT_EQ(fake_.commits()[0].checkpoint().checksum(), "0badf00d");
  ASSERT_EQ(fake_.finishes().size(), 1u);
  EXPECT_EQ(fake_.finishes()[0].reason(), flame::v1::FINISH_REASON_COMPLETED);
  EXPECT_EQ(fake_.finishes()[0].step(), 20);
}

TEST_F(CoordinatorClientTest, EveryFactOfAProgressUpdateArrives) {
  std::unique_ptr<CoordinatorClient> client = Connect();
  ASSERT_TRUE(client->Join(1, "h").ok());
  ProgressUpdate p;  // a distinct value in every field
  p.step = 30;
  p.total_steps = 300;
  p.tokens = 61440;
  p.loss = 5.5;
  p.max_loss = 5.75;
  p.lr = 2e-3;
  p.grad_norm = 0.875;
  p.tokens_per_second = 1024;
  p.mfu = 12.5;
  p.tflops = 0.125;
  p.memory_gib = 1.5;
  p.memory_active_gib = 1.25;
  p.memory_peak_gib = 2.5;
  p.step_seconds = 0.375;
  p.data_loading_seconds = 0.0625;
  p.data_loading_share = 16.5;
  p.skipped_steps = 4;
  p.elapsed_seconds = 11.25;
  p.resumed_from_step = 20;
  p.eval_loss = 5.25;
  p.eval_step = 30;
  client->ReportProgress(p);
  ASSERT_TRUE(client->Finish(FinishReason::kCompleted, "", 30).ok());
  ASSERT_EQ(fake_.progress().size(), 1u);
  const flame::v1::ProgressReport report = fake_.progress()[0];
  const flame::v1::Progress& got = report.progress();
  EXPECT_EQ(got.step(), 30);
  EXPECT_EQ(got.total_steps(), 300);
  EXPECT_EQ(got.tokens(), 61440);
  EXPECT_EQ(got.loss(), 5.5);
  EXPECT_EQ(got.max_loss(), 5.75);
  EXPECT_EQ(got.lr(), 2e-3);
  EXPECT_EQ(got.grad_norm(), 0.875);
  EXPECT_EQ(got.tokens_per_second(), 1024);
  EXPECT_EQ(got.mfu(), 12.5);
  EXPECT_EQ(got.tflops(), 0.125);
  EXPECT_EQ(got.memory_gib(), 1.5);
  EXPECT_EQ(got.memory_active_gib(), 1.25);
  EXPECT_EQ(got.memory_peak_gib(), 2.5);
  EXPECT_EQ(got.step_seconds(), 0.375);
  EXPECT_EQ(got.data_loading_seconds(), 0.0625);
  EXPECT_EQ(got.data_loading_share(), 16.5);
  EXPECT_EQ(got.skipped_steps(), 4);
  EXPECT_EQ(got.elapsed_seconds(), 11.25);
  EXPECT_EQ(report.resumed_from_step(), 20);
  EXPECT_EQ(got.eval_loss(), 5.25);
  EXPECT_EQ(got.eval_step(), 30);
}

TEST_F(CoordinatorClientTest, AStaleReplyMakesTheTrainerAbandonAndSkipsFinish) {
  std::unique_ptr<CoordinatorClient> client = Connect();
  ASSERT_TRUE(client->Join(1, "h").ok());
  fake_.set_stale(true);
  client->ReportProgress(ProgressUpdate{});
  ASSERT_TRUE(
      fake_.WaitFor([&] { return client->Current(2) == Directive::kAbandon; }, milliseconds(3000)));
  EXPECT_EQ(client->Finish(FinishReason::kStopped, "", 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fake_.finishes().empty());
}

TEST_F(CoordinatorClientTest, FinishGivesUpAtItsDeadlineWhenTheCoordinatorStaysAway) {
  finish_deadline_ms_ = 300;
  std::unique_ptr<CoordinatorClient> client = Connect();
  ASSERT_TRUE(client->Join(1, "h").ok());
  fake_.FailNextCalls(1000000, grpc::StatusCode::UNAVAILABLE);
  client->ReportProgress(ProgressUpdate{});
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = client->Finish(FinishReason::kError, "boom", 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(WorkerIdentity, ReadsTheLauncherEnvironment) {
  std::map<std::string, std::string> env = {{"FLAME_COORDINATOR", "127.0.0.1:7000"},
                                            {"FLAME_JOB_ID", "j1"},
                                            {"FLAME_ATTEMPT", "2"},
                                            {"RANK", "1"},
                                            {"WORLD_SIZE", "2"},
                                            {"MASTER_ADDR", "10.0.0.1"},
                                            {"MASTER_PORT", "29500"},
                                            {"FLAME_TOKEN", "t"}};
  const auto getenv = [&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  absl::StatusOr<WorkerIdentity> id = ParseWorkerIdentity(getenv);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->coordinator, "127.0.0.1:7000");
  EXPECT_EQ(id->attempt, 2);
  EXPECT_EQ(id->rank, 1);
  EXPECT_EQ(id->local_rank, 1);  // defaults to RANK
  EXPECT_EQ(id->master_addr, "10.0.0.1");
  EXPECT_EQ(id->master_port, 29500);
  EXPECT_EQ(id->token, "t");

  env["RANK"] = "2";
  EXPECT_NE(ParseWorkerIdentity(getenv).status().message().find("RANK must be"), std::string::npos);
  env["RANK"] = "0";
  env.erase("MASTER_PORT");
  EXPECT_NE(ParseWorkerIdentity(getenv).status().message().find("MASTER_PORT is not set"),
            std::string::npos);
  env["WORLD_SIZE"] = "1";  // one rank needs no store
  EXPECT_TRUE(ParseWorkerIdentity(getenv).ok());
  env.erase("FLAME_JOB_ID");
  EXPECT_NE(ParseWorkerIdentity(getenv).status().message().find("FLAME_JOB_ID"), std::string::npos);
}

}  // namespace
}  // namespace flame::worker
