// flame's checkpoint options, each through a real training run on the demo corpus:
// exclude_from_loading, initial_load_path (our step-N or an export folder), load_step (including
// the step-0 seed), keep_latest_k = 1, create_seed_checkpoint, and a final weights-only save in
// export_dtype.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "common/files.h"
#include "nlohmann/json.hpp"
#include "tests/worker/test_util.h"
#include "tests/worker/trainer_harness.h"
#include "worker/checkpoint/exporter.h"
#include "worker/checkpoint/safetensors.h"

namespace flame::worker {
namespace {

using Json = nlohmann::json;
using testing::DemoTrainConfig;
using testing::ExpectLossesMatch;
using testing::RunRecord;
using testing::TempDir;
using testing::Train;

// The demo run: 8 steps, a checkpoint every 4.
class CheckpointOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    straight_ = Train(DemoTrainConfig(straight_dir_.path()));
    ASSERT_TRUE(straight_.result.ok()) << straight_.result.status();
  }
  // A run that trained to step 4 (and saved it) in a fresh dump folder.
  TrainConfig FirstHalf(const std::string& dump) {
    TrainConfig config = DemoTrainConfig(dump);
    testing::DirectiveAt pause(4, Directive::kCheckpointStop);
    const RunRecord first = Train(config, &pause);
    EXPECT_TRUE(first.result.ok()) << first.result.status();
    return config;
  }

  TempDir straight_dir_, dir_;
  RunRecord straight_;
};

// An export of `checkpoint` with the model config `config` into `output`.
ExportRequest MakeRequest(const std::string& checkpoint, const std::string& config,
                          const std::string& output, const std::string& dtype = "float32") {
  ExportRequest request;
  request.checkpoint = checkpoint;
  request.model_config = config;
  request.output = output;
  request.dtype = dtype;
  return request;
}

Json Manifest(const std::string& step_dir) {
  return Json::parse(*ReadFileToString(step_dir + "/manifest.json"));
}

TEST_F(CheckpointOptions, ManifestCarriesStepTokensHashDataPositionsRngAndChecksums) {
  TrainConfig config = FirstHalf(dir_.path());
  const Json manifest = Manifest(config.CheckpointRoot() + "/step-4");
  EXPECT_EQ(manifest["kind"], "full");
  EXPECT_EQ(manifest["step"], 4);
  EXPECT_EQ(manifest["tokens"], 4 * 4 * 64);
  EXPECT_TRUE(manifest.contains("config_hash"));
  ASSERT_EQ(manifest["data_positions"].size(), 1u);
  EXPECT_TRUE(manifest["data_positions"][0].is_object());  // decoded, readable
  EXPECT_EQ(manifest["rng"]["file"], "rng.pt");
  for (const char* file :
       {"model.pt", "optimizer.pt", "rng.pt", "train_state.json", "data_positions.json"}) {
    EXPECT_EQ(manifest["files"][file]["bytes"].get<int64_t>(),
              *FileSize(config.CheckpointRoot() + "/step-4/" + file))
        << file;
    EXPECT_EQ(manifest["files"][file]["crc32"].get<std::string>().size(), 8u) << file;
  }
}

TEST_F(CheckpointOptions, ExcludeFromLoadingSkipsEachComponent) {
  auto resume = [&](std::vector<std::string> exclude) {
    TempDir dir;
    TrainConfig config = FirstHalf(dir.path());
    config.checkpoint.exclude_from_loading = std::move(exclude);
    return Train(config);
  };
  // Nothing excluded: the exact continuation.
  const RunRecord all = resume({});
  ASSERT_TRUE(all.result.ok()) << all.result.status();
  ExpectLossesMatch(all.losses, straight_.losses, 5, 8, 1e-6);
  // Without the optimizer: step 5 (weights and data restored) is the same, then fresh Adam
  // moments take another step.
  const RunRecord optimizer = resume({"optimizer"});
  ASSERT_TRUE(optimizer.result.ok()) << optimizer.result.status();
  EXPECT_EQ(optimizer.resumed_from, 4);
  EXPECT_DOUBLE_EQ(optimizer.losses.at(5), straight_.losses.at(5));
  EXPECT_NE(optimizer.losses.at(6), straight_.losses.at(6));
  // Without the LR schedule: warm-up starts over, so step 5 updates with another LR.
  const RunRecord schedule = resume({"lr_scheduler"});
  ASSERT_TRUE(schedule.result.ok()) << schedule.result.status();
  EXPECT_DOUBLE_EQ(schedule.losses.at(5), straight_.losses.at(5));
  EXPECT_NE(schedule.losses.at(6), straight_.losses.at(6));
  // The first report (step 6) shows the LR after 2 schedule steps: warm-up factor 3/4.
  EXPECT_EQ(schedule.progress.front().step, 6);
  EXPECT_NEAR(schedule.progress.front().lr, 3e-3 * 3 / 4, 1e-12);
  // Without the data position: step 5 sees the corpus from its start again.
  const RunRecord data = resume({"dataloader"});
  ASSERT_TRUE(data.result.ok()) << data.result.status();
  EXPECT_NE(data.losses.at(5), straight_.losses.at(5));
  // Without the train state: the weights carry over, the step count starts from 0.
  const RunRecord train_state = resume({"train_state"});
  ASSERT_TRUE(train_state.result.ok()) << train_state.result.status();
  EXPECT_EQ(train_state.resumed_from, 0);
  EXPECT_EQ(train_state.losses.size(), 8u);
  // Its step 1 has step 5's weights and data.
  EXPECT_DOUBLE_EQ(train_state.losses.at(1), straight_.losses.at(5));
  // Without the model: the step and data go on, the weights are the initial ones.
  const RunRecord model = resume({"model"});
  ASSERT_TRUE(model.result.ok()) << model.result.status();
  EXPECT_EQ(model.resumed_from, 4);
  EXPECT_NEAR(model.losses.at(5), std::log(2048.0), 0.2);
}

TEST_F(CheckpointOptions, UnknownExcludedComponentIsAClearError) {
  TrainConfig config = DemoTrainConfig(dir_.path());
  config.checkpoint.exclude_from_loading = {"optimizer", "weights"};
  const RunRecord run = Train(config);
  ASSERT_FALSE(run.result.ok());
  EXPECT_NE(run.result.status().message().find("checkpoint.exclude_from_loading"),
            std::string::npos);
  EXPECT_NE(run.result.status().message().find("\"weights\""), std::string::npos)
      << run.result.status();
}

TEST_F(CheckpointOptions, InitialLoadPathFromAnExportStartsAtStepZeroWithItsWeights) {
  TempDir source_dir;
  const TrainConfig source = FirstHalf(source_dir.path());
  ExportRequest request = MakeRequest(source.CheckpointRoot() + "/step-4", source.model_config,
                                      source_dir.path() + "/export");
  ASSERT_TRUE(ExportCheckpoint(request).ok());

  // From the export (weights only, the default) and from our own step-4 (weights only): the
  // same weights, so the same run, bit for bit; and not a fresh model's first loss.
  TrainConfig from_export = DemoTrainConfig(dir_.path() + "/a");
  from_export.checkpoint.initial_load_path = request.output;
  const RunRecord a = Train(from_export);
  ASSERT_TRUE(a.result.ok()) << a.result.status();
  TempDir other;
  TrainConfig from_step = DemoTrainConfig(other.path());
  from_step.checkpoint.initial_load_path = request.checkpoint;
  const RunRecord b = Train(from_step);
  ASSERT_TRUE(b.result.ok()) << b.result.status();
  EXPECT_EQ(a.resumed_from, 0);
  EXPECT_EQ(a.losses.begin()->first, 1);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_LT(a.losses.at(1), straight_.losses.at(1));  // it has trained on that batch

  // Once the job has checkpoints of its own, initial_load_path is not used any more.
  from_export.training.steps = 10;
  from_export.checkpoint.initial_load_path = dir_.path() + "/nonexistent";
  const RunRecord again = Train(from_export);
  ASSERT_TRUE(again.result.ok()) << again.result.status();
  EXPECT_EQ(again.resumed_from, 8);

  // A folder that is neither kind is refused by name.
  TempDir empty;
  TrainConfig bad = DemoTrainConfig(empty.path() + "/dump");
  bad.checkpoint.initial_load_path = empty.path();
  const RunRecord refused = Train(bad);
  ASSERT_FALSE(refused.result.ok());
  EXPECT_NE(refused.result.status().message().find(empty.path()), std::string::npos)
      << refused.result.status();
}

TEST_F(CheckpointOptions, InitialLoadPathWithFullStateResumesThatRun) {
  TempDir source_dir;
  const TrainConfig source = FirstHalf(source_dir.path());
  TrainConfig config = DemoTrainConfig(dir_.path());
  config.checkpoint.initial_load_path = source.CheckpointRoot() + "/step-4";
  config.checkpoint.initial_load_model_weights_only = false;
  const RunRecord run = Train(config);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.resumed_from, 4);
  ExpectLossesMatch(run.losses, straight_.losses, 5, 8, 1e-6);
}

TEST_F(CheckpointOptions, LoadStepPicksAnOlderCheckpoint) {
  TrainConfig config = DemoTrainConfig(straight_dir_.path());  // has step-4 and step-8
  config.training.steps = 8;
  config.checkpoint.load_step = 4;
  const RunRecord run = Train(config);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.resumed_from, 4);
  ExpectLossesMatch(run.losses, straight_.losses, 5, 8, 1e-6);
}

TEST_F(CheckpointOptions, KeepLatestOneKeepsOnlyTheNewestAndResumesFromIt) {
  TrainConfig config = DemoTrainConfig(dir_.path());
  config.checkpoint.interval = 2;
  config.checkpoint.keep_latest_k = 1;
  testing::DirectiveAt stop(5, Directive::kStop);
  ASSERT_TRUE(Train(config, &stop).result.ok());
  EXPECT_EQ(CheckpointStore(config.CheckpointRoot()).ListSteps(), std::vector<int64_t>{4});
  const RunRecord resumed = Train(config);
  ASSERT_TRUE(resumed.result.ok()) << resumed.result.status();
  EXPECT_EQ(resumed.resumed_from, 4);
  ExpectLossesMatch(resumed.losses, straight_.losses, 5, 8, 1e-6);
  EXPECT_EQ(CheckpointStore(config.CheckpointRoot()).ListSteps(), std::vector<int64_t>{8});
}

TEST_F(CheckpointOptions, SeedCheckpointHoldsTheInitialWeightsAndRunsStartFromIt) {
  TrainConfig seed = DemoTrainConfig(dir_.path());
  seed.training.seed = 1234;  // other initial weights than the demo's seed
  seed.checkpoint.create_seed_checkpoint = true;
  const RunRecord created = Train(seed);
  ASSERT_TRUE(created.result.ok()) << created.result.status();
  EXPECT_EQ(created.result->step, 0);
  EXPECT_TRUE(created.losses.empty());  // it trains nothing
  CheckpointStore store(seed.CheckpointRoot());
  EXPECT_EQ(store.ListSteps(), std::vector<int64_t>{0});
  ASSERT_TRUE(store.Verify(0).ok());
  EXPECT_EQ(Manifest(store.StepPath(0))["kind"], "weights_only");
  EXPECT_EQ(safetensors::Read(store.StepPath(0) + "/model.safetensors")
                ->tensors()
                .at("lm_head.weight")
                .dtype,
            "F32");
  // A second seed into the same folder is refused rather than overwriting anything.
  const RunRecord twice = Train(seed);
  ASSERT_FALSE(twice.result.ok());
  EXPECT_NE(twice.result.status().message().find("create_seed_checkpoint"), std::string::npos);

  // A run with the demo seed loads step-0 as weights only: it trains exactly like a fresh run
  // whose seed made those weights.
  const RunRecord from_seed = Train(DemoTrainConfig(dir_.path()));
  ASSERT_TRUE(from_seed.result.ok()) << from_seed.result.status();
  EXPECT_EQ(from_seed.resumed_from, 0);
  TempDir fresh_dir;
  TrainConfig fresh = DemoTrainConfig(fresh_dir.path());
  fresh.training.seed = 1234;
  const RunRecord fresh_run = Train(fresh);
  ASSERT_TRUE(fresh_run.result.ok());
  EXPECT_EQ(from_seed.losses, fresh_run.losses);
  EXPECT_NE(from_seed.losses.at(1), straight_.losses.at(1));
}

TEST_F(CheckpointOptions, SeedCheckpointNeedsASingleRank) {
  TrainConfig config = DemoTrainConfig(dir_.path());
  config.checkpoint.create_seed_checkpoint = true;
  const RunRecord run = testing::TrainTwoRanks(config);
  ASSERT_FALSE(run.result.ok());
  EXPECT_NE(run.result.status().message().find("resources.ranks = 1"), std::string::npos)
      << run.result.status();
  EXPECT_TRUE(CheckpointStore(config.CheckpointRoot()).ListSteps().empty());
}

TEST_F(CheckpointOptions, LastSaveKeepsBfloat16WeightsOnlyAndCannotBeResumedFrom) {
  TrainConfig config = DemoTrainConfig(dir_.path());
  config.checkpoint.last_save_model_weights_only = true;
  config.checkpoint.export_dtype = "bfloat16";
  const RunRecord run = Train(config);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  CheckpointStore store(config.CheckpointRoot());
  ASSERT_TRUE(store.Verify(8).ok());
  // On disk: the weights in bf16 and the train state; no optimizer, RNG or data state.
  const std::string last = store.StepPath(8);
  EXPECT_EQ(Manifest(last)["kind"], "weights_only");
  EXPECT_FALSE(PathExists(last + "/optimizer.pt"));
  EXPECT_FALSE(PathExists(last + "/model.pt"));
  const safetensors::File file = *safetensors::Read(last + "/model.safetensors");
  for (const auto& [name, info] : file.tensors()) EXPECT_EQ(info.dtype, "BF16") << name;
  for (const auto& [name, weight] : run.weights) {
    ASSERT_TRUE(file.tensors().contains(name)) << name;
  }
  EXPECT_EQ(Manifest(store.StepPath(4))["kind"], "full");  // earlier saves stay full

  // The same job again: it is complete, nothing to train.
  const RunRecord again = Train(config);
  ASSERT_TRUE(again.result.ok()) << again.result.status();
  EXPECT_EQ(again.result->step, 8);
  EXPECT_TRUE(again.losses.empty());
  // Asked to go further, it refuses to resume from weights alone, and says what to do.
  config.training.steps = 12;
  const RunRecord further = Train(config);
  ASSERT_FALSE(further.result.ok());
  EXPECT_NE(further.result.status().message().find("model weights only"), std::string::npos)
      << further.result.status();
  EXPECT_NE(further.result.status().message().find("checkpoint.load_step"), std::string::npos);
  // The weights-only step exports like any other.
  ExportRequest request =
      MakeRequest(last, config.model_config, dir_.path() + "/export", "float32");
  const absl::Status exported = ExportCheckpoint(request);
  ASSERT_TRUE(exported.ok()) << exported;
  // From the last full checkpoint it goes on.
  config.checkpoint.load_step = 4;
  const RunRecord from_four = Train(config);
  ASSERT_TRUE(from_four.result.ok()) << from_four.result.status();
  EXPECT_EQ(from_four.resumed_from, 4);
}

}  // namespace
}  // namespace flame::worker
