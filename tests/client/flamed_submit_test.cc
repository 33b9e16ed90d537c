// A flame user's command line through the real flamectl to a real flamed (gRPC, RocksDB, on a
// loopback port with a temporary data directory): configs/jobs/fla.toml read first, the
// `--section.key` arguments over it, flamed's defaults under both, and the resolved spec that
// flamed stores, read back with `flamectl status -o json`. The worker is a script that exits at
// once; what it would train is not the point here.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_helpers.h"

namespace flame::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using std::chrono::seconds;

constexpr char kFlamed[] = FLAME_FLAMED_PATH;
constexpr char kFlamectl[] = FLAME_FLAMECTL_PATH;
constexpr char kFlaToml[] = FLAME_SOURCE_DIR "/configs/jobs/fla.toml";
constexpr char kModelConfig[] = FLAME_SOURCE_DIR "/configs/models/gla_tiny.json";

class FlamedSubmitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/flame_flamed_submit.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = std::filesystem::path(pattern).lexically_normal().string();
    data_dir_ = dir_ + "/data";
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/tok.model", "placeholder").ok());
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/data.jsonl", "{\"text\": \"hello\"}\n").ok());
    const std::string worker = dir_ + "/flame-worker";
    ASSERT_TRUE(WriteFileAtomically(worker, "#!/bin/sh\nexit 0\n").ok());
    ASSERT_EQ(::chmod(worker.c_str(), 0755), 0);
    ASSERT_TRUE(flamed_
                    .Start({kFlamed, "--listen", "127.0.0.1:0", "--metrics_listen", "127.0.0.1:0",
                            "--data_dir", data_dir_, "--worker_binary", worker, "--cpu_slots", "2"},
                           dir_ + "/flamed.log")
                    .ok());
    absl::StatusOr<std::string> addr =
        WaitForAddressFile(data_dir_ + "/flamed.addr", {"grpc"}, seconds(60));
    ASSERT_TRUE(addr.ok()) << addr.status() << "\n"
                           << ReadFileToString(dir_ + "/flamed.log").value_or("");
  }

  void TearDown() override {
    if (flamed_.Running()) (void)flamed_.Terminate(seconds(20));
    std::error_code ignored;
    if (!HasFailure()) std::filesystem::remove_all(dir_, ignored);
  }

  CommandResult Flamectl(std::vector<std::string> args) {
    args.insert(args.begin(), {kFlamectl, "--data-dir", data_dir_, "-o", "json"});
    return RunCommand(args, seconds(60));
  }

  // flame's documented command shape, with local files for its hub ids.
  std::vector<std::string> FlameCommand() const {
    return {"submit",
            "--",
            "--job.config_file",
            kFlaToml,
            "--job.dump_folder",
            dir_ + "/exp",
            "--model.config",
            kModelConfig,
            "--model.tokenizer_path",
            dir_ + "/tok.model",
            "--training.dataset",
            dir_ + "/data.jsonl",
            "--training.steps",
            "100",
            "--training.varlen",
            "--training.batch_size",
            "1",
            "--training.num_workers",
            "1",
            "--optimizer.lr=1e-3",
            "--metrics.log_freq",
            "5",
            "--checkpoint.no_initial_load_model_weights_only",
            "--resources.device",
            "cpu"};
  }

  std::string dir_;
  std::string data_dir_;
  BackgroundProcess flamed_;
};

// proto3 JSON writes 64-bit integers as strings.
std::string Int(const Json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

TEST_F(FlamedSubmitTest, FlameArgumentsOverFlaTomlGiveTheStoredSpec) {
  const CommandResult submitted = Flamectl(FlameCommand());
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const Json job = Json::parse(submitted.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(job.is_object()) << submitted.out;
  const std::string id = job.value("id", "");
  ASSERT_FALSE(id.empty()) << submitted.out;

  // What flamed stored, as any later `status` shows it.
  const CommandResult status = Flamectl({"status", id});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const Json spec = Json::parse(status.out, nullptr, false).value("spec", Json::object());
  ASSERT_FALSE(spec.empty()) << status.out;
  // The command line wins over the TOML ...
  EXPECT_EQ(Int(spec["training"]["steps"]), "100");
  EXPECT_EQ(spec["training"]["varlen"], true);
  EXPECT_EQ(Int(spec["training"]["batch_size"]), "1");
  EXPECT_DOUBLE_EQ(spec["optimizer"]["lr"].get<double>(), 1e-3);
  EXPECT_EQ(Int(spec["metrics"]["log_freq"]), "5");
  EXPECT_EQ(spec["checkpoint"]["initial_load_model_weights_only"], false);
  EXPECT_EQ(spec["job"]["dump_folder"], dir_ + "/exp");
  EXPECT_EQ(spec["model"]["config"], kModelConfig);
  // ... the TOML over flame's defaults ...
  EXPECT_EQ(Int(spec["profiling"]["profile_freq"]), "512");
  EXPECT_EQ(spec["profiling"]["save_traces_folder"], "profile_trace");
  EXPECT_EQ(spec["metrics"]["enable_wandb"], true);
  EXPECT_DOUBLE_EQ(spec["optimizer"]["eps"].get<double>(), 1e-15);
  EXPECT_EQ(spec["lr_scheduler"]["decay_type"], "cosine");
  EXPECT_EQ(Int(spec["checkpoint"]["interval"]), "2048");
  EXPECT_EQ(spec["checkpoint"]["interval_type"], "steps");
  EXPECT_EQ(spec["training"]["dataset_name"], "default");
  EXPECT_EQ(spec["activation_checkpoint"]["mode"], "none");
  EXPECT_EQ(spec["job"]["config_file"], kFlaToml);
  // ... and the defaults flamed resolved for what neither names.
  EXPECT_EQ(Int(spec["comm"]["init_timeout_seconds"]), "300");
  EXPECT_EQ(Int(spec["training"]["gc_freq"]), "50");
  EXPECT_EQ(spec["optimizer"]["implementation"], "fused");
  EXPECT_EQ(Int(spec["training"]["data_parallel_shard_degree"]), "-1");
  EXPECT_EQ(spec["checkpoint"]["export_dtype"], "float32");
}

TEST_F(FlamedSubmitTest, FlamedItselfRefusesAnUnsupportedValueByName) {
  std::vector<std::string> args = FlameCommand();
  args.insert(args.begin() + 1, "--no-local-check");
  args.insert(args.end(), {"--training.tensor_parallel_degree", "2"});
  const CommandResult result = Flamectl(args);
  EXPECT_EQ(result.exit_code, 2) << result.out << result.err;
  EXPECT_THAT(result.err, HasSubstr("training.tensor_parallel_degree must be 1 (got 2)"));
}

TEST_F(FlamedSubmitTest, AMisspeltFlameArgumentIsRefusedBeforeAnyRpc) {
  std::vector<std::string> args = FlameCommand();
  args.insert(args.end(), {"--training.stpes", "5"});
  const CommandResult result = Flamectl(args);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, HasSubstr("--training.stpes: unknown key training.stpes (did you mean "
                                    "training.steps?)"));
}

}  // namespace
}  // namespace flame::testing
