// End to end (issue 2, "What must be shown"): real flamed, flame-worker and flamectl processes
// on loopback, a temporary data directory, the demo corpus and the tiny GLA config. Everything
// goes through flamectl's command line and its `-o json` output, as a script would use it;
// /metrics is scraped over a plain socket.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_helpers.h"

namespace flame::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;
using std::chrono::seconds;

constexpr char kFlamed[] = FLAME_FLAMED_PATH;
constexpr char kWorker[] = FLAME_WORKER_PATH;
constexpr char kFlamectl[] = FLAME_FLAMECTL_PATH;
constexpr char kModelConfig[] = FLAME_SOURCE_DIR "/configs/models/gla_tiny.json";
constexpr char kDemoData[] = FLAME_DEMO_DATA_DIR;

// The two jobs: A trains to the end, B is long enough to be cancelled after a checkpoint.
constexpr int kStepsA = 40;
constexpr int kStepsB = 80;

// proto3 JSON prints 64-bit integers as strings; missing keys read as 0.
int64_t Int(const Json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  int64_t result = 0;
  if (value.is_string() && absl::SimpleAtoi(value.get<std::string>(), &result)) return result;
  return 0;
}

double Number(const Json& value) { return value.is_number() ? value.get<double>() : 0.0; }

std::string State(const Json& job) { return job.value("state", ""); }

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/flame_e2e.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = std::filesystem::path(pattern).lexically_normal().string();
    data_dir_ = dir_ + "/data";
    ASSERT_TRUE(PathExists(kModelConfig)) << kModelConfig;
    ASSERT_TRUE(PathExists(absl::StrCat(kDemoData, "/fortunes.model")))
        << "build the demo_data target first";
  }

  void TearDown() override {
    // Workers run in their own sessions and outlive flamed by design: stop the ones this test
    // caused, so that a failed run leaves nothing training in the background.
    if (flamed_.Running()) (void)flamed_.Terminate(seconds(20));
    for (pid_t pid : worker_pids_) {
      if (IsProcessOf(pid, "flame-worker")) ::kill(pid, SIGKILL);
    }
    if (HasFailure()) {
      std::cerr << "kept " << dir_ << " (flamed logs: " << dir_ << "/flamed-*.log)\n";
    } else {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  void StartFlamed() {
    const std::string addr_file = data_dir_ + "/flamed.addr";
    std::error_code ignored;
    std::filesystem::remove(addr_file, ignored);  // a stale file would name the old ports
    const std::string log = absl::StrCat(dir_, "/flamed-", ++flamed_starts_, ".log");
    ASSERT_TRUE(flamed_
                    .Start({kFlamed, "--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0",
                            "--data_dir", data_dir_, "--worker_binary", kWorker},
                           log)
                    .ok());
    absl::StatusOr<std::string> text =
        WaitForAddressFile(addr_file, {"grpc", "metrics"}, seconds(60));
    ASSERT_TRUE(text.ok()) << text.status() << "\n" << ReadFileToString(log).value_or("");
    for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      if (absl::ConsumePrefix(&line, "grpc=")) grpc_addr_ = std::string(line);
      if (absl::ConsumePrefix(&line, "metrics=")) metrics_addr_ = std::string(line);
    }
    ASSERT_FALSE(grpc_addr_.empty()) << *text;
    ASSERT_FALSE(metrics_addr_.empty()) << *text;
  }

  // SIGTERM must be a clean shutdown: exit code 0, in good time.
  void StopFlamed() {
    absl::StatusOr<int> code = flamed_.Terminate(seconds(30));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0);
  }

  // flamectl finds flamed the way a user's does: through <data dir>/flamed.addr.
  CommandResult Flamectl(std::vector<std::string> args, seconds timeout = seconds(60)) {
    args.insert(args.begin(), {kFlamectl, "--data-dir", data_dir_});
    return RunCommand(args, timeout);
  }

  Json FlamectlJson(std::vector<std::string> args) {
    args.insert(args.end(), {"-o", "json"});
    const CommandResult result = Flamectl(args);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    Json json = Json::parse(result.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(json.is_discarded()) << "not JSON: " << result.out;
    RememberWorkers(json);
    return json;
  }

  Json GetJob(const std::string& id) { return FlamectlJson({"status", id}); }

  Json WaitForJob(const std::string& id, const std::function<bool(const Json&)>& done,
                  const std::string& what, seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Json job;
    while (std::chrono::steady_clock::now() < deadline) {
      job = GetJob(id);
      if (done(job) || ::testing::Test::HasFailure()) return job;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " did not reach: " << what << "; last: " << job.dump(2);
    return job;
  }

  // A tiny GLA job: a few hundred tokens a step, so that a CPU trains it in seconds. The
  // dataset is given relative to the job file; flamectl must make it absolute for flamed.
  std::string WriteJobFile(const std::string& name, int steps, int checkpoint_interval) {
    const std::string dataset =
        std::filesystem::relative(absl::StrCat(kDemoData, "/fortunes.jsonl"), dir_).string();
    const std::string text = absl::StrCat(
        "name = \"", name, "\"\n", "[model]\nconfig = \"", kModelConfig, "\"\ntokenizer_path = \"",
        kDemoData, "/fortunes.model\"\n", "[optimizer]\nlr = 3e-3\n",
        "[lr_scheduler]\nwarmup_steps = 4\ndecay_type = \"cosine\"\nlr_min = 0.1\n",
        "[training]\nbatch_size = 4\nseq_len = 128\ncontext_len = 128\nsteps = ", steps,
        "\ndataset = \"", dataset, "\"\n", "[checkpoint]\ninterval = ", checkpoint_interval, "\n",
        "[metrics]\nlog_freq = 1\n", "[resources]\nranks = 1\ndevice = \"cpu\"\n");
    const std::string path = absl::StrCat(dir_, "/", name, ".toml");
    EXPECT_TRUE(WriteFileAtomically(path, text).ok());
    return path;
  }

  // Phase times on stderr: when the test is slow, they say which process to look at.
  void Mark(const std::string& phase) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start_);
    std::cerr << "[e2e " << elapsed.count() / 1000.0 << "s] " << phase << std::endl;
  }

  void RememberWorkers(const Json& json) {
    auto remember = [this](const Json& job) {
      for (const Json& attempt : job.value("attempts", Json::array())) {
        for (const Json& rank : attempt.value("ranks", Json::array())) {
          if (Int(rank.value("pid", Json())) > 0) worker_pids_.insert(Int(rank["pid"]));
        }
      }
    };
    if (!json.is_object()) return;
    if (json.contains("jobs")) {
      for (const Json& job : json["jobs"]) remember(job);
    } else {
      remember(json);
    }
  }

  std::string dir_;
  std::string data_dir_;
  std::string grpc_addr_;
  std::string metrics_addr_;
  BackgroundProcess flamed_;
  int flamed_starts_ = 0;
  std::set<pid_t> worker_pids_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The value of the `flame_job_step` sample labelled with `job_id`, or -1.
double JobStepSample(const std::string& metrics, const std::string& job_id) {
  const std::string label = absl::StrCat("job_id=\"", job_id, "\"");
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, "flame_job_step{") || !absl::StrContains(line, label)) continue;
    const size_t brace = line.rfind('}');
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line.substr(brace + 1), ' ', absl::SkipEmpty());
    double value = -1;
    if (!fields.empty() && absl::SimpleAtod(fields[0], &value)) return value;
  }
  return -1;
}

TEST_F(EndToEndTest, BadInputFailsWithExitCodeTwoNamingTheProblemAndLeavesNoJob) {
  ASSERT_NO_FATAL_FAILURE(StartFlamed());
  const std::string good = WriteJobFile("good", kStepsA, 10);
  const std::string malformed = dir_ + "/malformed.toml";
  ASSERT_TRUE(WriteFileAtomically(malformed, "[training]\nsteps = 10\nseq_len = = 3\n").ok());
  const std::string typo = dir_ + "/typo.toml";
  std::string typo_text = ReadFileToString(good).value();
  typo_text.replace(typo_text.find("\nsteps = ") + 1, 5, "stpes");  // not warmup_steps
  ASSERT_TRUE(WriteFileAtomically(typo, typo_text).ok());
  const std::string missing = dir_ + "/missing.jsonl";

  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expected;  // each must appear in stderr
  };
  const std::vector<Case> cases = {
      {{"submit", malformed}, {"malformed.toml:3:"}},
      {{"submit", typo},
       {"typo.toml:", "unknown key training.stpes (did you mean training.steps?)"}},
      {{"submit", good, "--set", "training.stpes=5"},
       {"unknown key training.stpes (did you mean training.steps?)"}},
      {{"submit", good, "--set", "training.steps=-5"}, {"training.steps", "-5"}},
      {{"submit", good, "--set", "training.dataset=" + missing},
       {"training.dataset", "missing.jsonl"}},
      // The same two again, checked by flamed instead of flamectl: its INVALID_ARGUMENT
      // message is printed verbatim and also means exit code 2.
      {{"submit", good, "--no-local-check", "--set", "training.steps=-5"}, {"training.steps"}},
      {{"submit", good, "--no-local-check", "--set", "training.dataset=" + missing},
       {"training.dataset", "missing.jsonl"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrJoin(c.args, " "));
    const CommandResult result = Flamectl(c.args);
    EXPECT_EQ(result.exit_code, 2) << result.err;
    EXPECT_THAT(result.err, StartsWith("flamectl: "));
    for (const std::string& text : c.expected) EXPECT_THAT(result.err, HasSubstr(text));
  }
  EXPECT_TRUE(FlamectlJson({"list"})["jobs"].empty()) << "a refused submit left a job behind";
  EXPECT_EQ(Flamectl({"status", "no-such-job"}).exit_code, 3);
  StopFlamed();
}

TEST_F(EndToEndTest, JobsTrainAreCancelledSurviveARestartAndResumeFromTheirCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(StartFlamed());

  // Job A trains to the end, and its loss falls.
  Mark("flamed up; submitting job A");
  const Json submitted = FlamectlJson({"submit", WriteJobFile("job-a", kStepsA, 10)});
  const std::string a = submitted.value("id", "");
  ASSERT_FALSE(a.empty()) << submitted.dump(2);
  const CommandResult watch = Flamectl({"watch", a, "-o", "json"}, seconds(150));
  ASSERT_EQ(watch.exit_code, 0) << watch.err << watch.out;
  EXPECT_THAT(watch.out, HasSubstr("JOB_STATE_SUCCEEDED"));

  Mark("job A ended");
  const Json job_a = GetJob(a);
  ASSERT_EQ(State(job_a), "JOB_STATE_SUCCEEDED") << job_a.dump(2);
  EXPECT_EQ(Int(job_a["progress"]["step"]), kStepsA);
  double first_loss = 0;
  for (const Json& point : job_a.value("history", Json::array())) {
    if (Int(point["step"]) == 1) first_loss = Number(point["loss"]);
  }
  const double final_loss = Number(job_a["progress"]["loss"]);
  ASSERT_GT(first_loss, 0) << "no step-1 point in the history: " << job_a["history"].dump();
  EXPECT_LT(final_loss, 0.9 * first_loss) << "step 1: " << first_loss << ", end: " << final_loss;

  absl::StatusOr<std::string> metrics = HttpGet(metrics_addr_, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(JobStepSample(*metrics, a), kStepsA) << *metrics;

  const CommandResult logs = Flamectl({"logs", a, "--rank", "0"});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_FALSE(logs.out.empty());
  EXPECT_EQ(Flamectl({"cancel", a}).exit_code, 5) << "cancelling a finished job is refused";

  // Job B is cancelled after its first checkpoint, before its end.
  Mark("job A checked; submitting job B");
  const std::string b =
      FlamectlJson({"submit", WriteJobFile("job-b", kStepsB, 10)}).value("id", "");
  ASSERT_FALSE(b.empty());
  WaitForJob(
      b,
      [](const Json& job) {
        return State(job) == "JOB_STATE_RUNNING" &&
               !job.value("checkpoints", Json::array()).empty();
      },
      "RUNNING with a checkpoint", seconds(120));
  ASSERT_FALSE(HasFailure());
  Mark("job B passed a checkpoint; cancelling");
  const CommandResult cancel = Flamectl({"cancel", b});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  const Json cancelled = WaitForJob(
      b, [](const Json& job) { return State(job) == "JOB_STATE_CANCELLED"; }, "CANCELLED",
      seconds(60));
  ASSERT_FALSE(HasFailure());
  const int64_t cancelled_step = Int(cancelled["progress"]["step"]);
  const Json& checkpoints = cancelled["checkpoints"];
  const int64_t checkpoint_step = Int(checkpoints[checkpoints.size() - 1]["step"]);
  ASSERT_LT(cancelled_step, kStepsB) << "job B ended before it could be cancelled mid-run";
  ASSERT_GT(checkpoint_step, 0);

  // A restarted flamed still knows both jobs, unchanged.
  Mark("job B cancelled; restarting flamed");
  ASSERT_NO_FATAL_FAILURE(StopFlamed());
  ASSERT_NO_FATAL_FAILURE(StartFlamed());
  const Json listed = FlamectlJson({"list"});
  ASSERT_EQ(listed["jobs"].size(), 2u) << listed.dump(2);
  EXPECT_EQ(listed["jobs"][0].value("id", ""), a);
  EXPECT_EQ(State(listed["jobs"][0]), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(Int(listed["jobs"][0]["progress"]["step"]), kStepsA);
  EXPECT_EQ(listed["jobs"][1].value("id", ""), b);
  EXPECT_EQ(State(listed["jobs"][1]), "JOB_STATE_CANCELLED");
  EXPECT_EQ(Int(listed["jobs"][1]["progress"]["step"]), cancelled_step);

  // Resumed, B continues from its checkpoint, not from step 0, and finishes.
  Mark("flamed restarted; resuming job B");
  const CommandResult resume = Flamectl({"resume", b});
  ASSERT_EQ(resume.exit_code, 0) << resume.err;
  const CommandResult watch_b = Flamectl({"watch", b}, seconds(200));
  EXPECT_EQ(watch_b.exit_code, 0) << watch_b.err << watch_b.out;
  Mark("job B ended");
  const Json job_b = GetJob(b);
  EXPECT_EQ(State(job_b), "JOB_STATE_SUCCEEDED") << job_b.dump(2);
  EXPECT_EQ(Int(job_b["progress"]["step"]), kStepsB);
  const Json& attempts = job_b["attempts"];
  ASSERT_GE(attempts.size(), 2u) << job_b.dump(2);
  const int64_t start_step = Int(attempts[attempts.size() - 1]["start_step"]);
  EXPECT_GE(start_step, checkpoint_step);
  EXPECT_LE(start_step, cancelled_step);
  StopFlamed();
}

}  // namespace
}  // namespace flame::testing
