// flamectl's commands against an in-process fake of CoordinatorService on a loopback port:
// exit codes from watched outcomes and from flamed's errors, the bearer token, and the log
// cursor across a dropped stream.
#include "client/commands.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "flame/v1/coordinator.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

flame::v1::Job MakeJob(flame::v1::JobState state, int64_t step) {
  flame::v1::Job job;
  job.set_id("j-1");
  job.set_state(state);
  job.mutable_progress()->set_step(step);
  job.mutable_progress()->set_total_steps(10);
  return job;
}

// Scripted answers; every call is recorded so that tests can check what flamectl sent.
class FakeCoordinator final : public flame::v1::CoordinatorService::Service {
 public:
  // Each WatchJob call streams the next script; a script that does not end in a stopped state
  // ends its stream with UNAVAILABLE, as a restarting flamed would.
  std::vector<std::vector<flame::v1::Job>> watch_scripts;
  std::vector<int64_t> log_offsets;  // the offset of each StreamLogs call
  std::string last_authorization;

  grpc::Status GetJob(grpc::ServerContext* context, const flame::v1::GetJobRequest* request,
                      flame::v1::Job* job) override {
    Record(context);
    if (request->job_id() != "j-1") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    *job = MakeJob(flame::v1::JOB_STATE_RUNNING, 3);
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext* context, const flame::v1::CancelJobRequest* request,
                         flame::v1::Job* job) override {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "job j-1 has already SUCCEEDED");
  }

  grpc::Status WatchJob(grpc::ServerContext* context, const flame::v1::WatchJobRequest* request,
                        grpc::ServerWriter<flame::v1::Job>* writer) override {
    std::vector<flame::v1::Job> script;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (watch_calls_ >= watch_scripts.size()) {
        return grpc::Status(grpc::StatusCode::INTERNAL, "unscripted");
      }
      script = watch_scripts[watch_calls_++];
    }
    for (const flame::v1::Job& job : script) writer->Write(job);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "going away");
  }

  // The log is "one\ntwo\n". The first call sends "one\n" and drops; later calls send the rest
  // from the offset they ask for.
  grpc::Status StreamLogs(grpc::ServerContext* context, const flame::v1::StreamLogsRequest* request,
                          grpc::ServerWriter<flame::v1::LogChunk>* writer) override {
    const std::string log = "one\ntwo\n";
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      first = log_offsets.empty();
      log_offsets.push_back(request->offset());
    }
    flame::v1::LogChunk chunk;
    const int64_t end = first ? 4 : static_cast<int64_t>(log.size());
    chunk.set_data(log.substr(request->offset(), end - request->offset()));
    chunk.set_next_offset(end);
    writer->Write(chunk);
    if (first) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "dropped");
    return grpc::Status::OK;
  }

 private:
  void Record(grpc::ServerContext* context) {
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("authorization");
    std::lock_guard<std::mutex> lock(mutex_);
    if (it != metadata.end()) last_authorization.assign(it->second.data(), it->second.size());
  }

  std::mutex mutex_;
  size_t watch_calls_ = 0;
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    context_.connection.address.addr_flag = absl::StrCat("127.0.0.1:", port);
    context_.out = &out_;
  }

  void TearDown() override { server_->Shutdown(); }

  FakeCoordinator fake_;
  std::unique_ptr<grpc::Server> server_;
  std::ostringstream out_;
  CommandContext context_;
};

TEST_F(CommandsTest, StatusSendsTheTokenAsABearerHeader) {
  context_.connection.token = "s3cret";
  absl::StatusOr<ExitCode> code = RunStatus(context_, "j-1");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, ExitCode::kOk);
  EXPECT_EQ(fake_.last_authorization, "Bearer s3cret");
  EXPECT_THAT(out_.str(), HasSubstr("RUNNING"));
}

TEST_F(CommandsTest, AnUnknownJobIsNotFoundWithFlamedsMessage) {
  absl::StatusOr<ExitCode> code = RunStatus(context_, "j-9");
  EXPECT_EQ(code.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(code.status().message(), "no job j-9");
  EXPECT_EQ(ExitCodeForStatus(code.status()), ExitCode::kNotFound);
}

TEST_F(CommandsTest, ARefusedCancelMapsToTheRefusedExitCode) {
  absl::StatusOr<ExitCode> code = RunJobAction(context_, JobAction::kCancel, "j-1");
  EXPECT_EQ(ExitCodeForStatus(code.status()), ExitCode::kRefused);
  EXPECT_THAT(code.status().message(), HasSubstr("already SUCCEEDED"));
}

TEST_F(CommandsTest, WatchExitsWithTheCodeOfHowTheJobEnded) {
  fake_.watch_scripts = {
      {MakeJob(flame::v1::JOB_STATE_RUNNING, 2), MakeJob(flame::v1::JOB_STATE_FAILED, 4)}};
  absl::StatusOr<ExitCode> code = RunWatch(context_, "j-1");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, ExitCode::kJobFailed);
  // Not a terminal: one line per update.
  EXPECT_THAT(out_.str(), HasSubstr("RUNNING  [#"));
  EXPECT_THAT(out_.str(), HasSubstr("\nFAILED  ["));
}

TEST_F(CommandsTest, WatchReconnectsWhenTheStreamDropsAndPrintsJsonLines) {
  context_.format = OutputFormat::kJson;
  fake_.watch_scripts = {{MakeJob(flame::v1::JOB_STATE_RUNNING, 2)},
                         {MakeJob(flame::v1::JOB_STATE_CANCELLED, 5)}};
  absl::StatusOr<ExitCode> code = RunWatch(context_, "j-1");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, ExitCode::kJobCancelled);
  std::vector<std::string> lines = absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  EXPECT_THAT(lines[0], HasSubstr("\"state\":\"JOB_STATE_RUNNING\""));
  EXPECT_THAT(lines[1], HasSubstr("\"state\":\"JOB_STATE_CANCELLED\""));
}

TEST_F(CommandsTest, WatchRedrawsOneLineInPlaceOnATerminalCutToItsWidth) {
  context_.out_is_terminal = true;
  context_.terminal_width = 20;
  fake_.watch_scripts = {
      {MakeJob(flame::v1::JOB_STATE_RUNNING, 2), MakeJob(flame::v1::JOB_STATE_SUCCEEDED, 10)}};
  absl::StatusOr<ExitCode> code = RunWatch(context_, "j-1");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, ExitCode::kOk);
  EXPECT_EQ(out_.str(),
            "\rRUNNING  [####.....\x1b[K"
            "\rSUCCEEDED  [#######\x1b[K\n");
}

TEST_F(CommandsTest, LogsResumeFromTheLastOffsetSoNothingIsLostOrRepeated) {
  absl::StatusOr<ExitCode> code = RunLogs(context_, {"j-1", 0, /*follow=*/true});
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(out_.str(), "one\ntwo\n");
  EXPECT_THAT(fake_.log_offsets, ElementsAre(0, 4));
}

TEST_F(CommandsTest, NoFlamedAtTheAddressIsUnavailable) {
  server_->Shutdown();
  absl::StatusOr<ExitCode> code = RunStatus(context_, "j-1");
  EXPECT_EQ(ExitCodeForStatus(code.status()), ExitCode::kUnavailable);
  EXPECT_THAT(code.status().message(), HasSubstr("cannot reach flamed at 127.0.0.1:"));
}

}  // namespace
}  // namespace flame::client
