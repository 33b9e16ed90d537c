// Checkpoints: a save/load round trip restores everything, and a torn or corrupt step-N is
// detected and skipped, never loaded.
#include "worker/checkpoint/checkpoint_store.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "tests/worker/test_util.h"
#include "worker/config/model_config.h"
#include "worker/model/causal_lm.h"
#include "worker/optim/optimizer.h"

namespace flame::worker {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

ModelConfig SmallModel(int64_t hidden = 16) {
  ModelConfig config;
  config.model_type = "gla";
  config.hidden_size = hidden;
  config.num_hidden_layers = 1;
  config.vocab_size = 30;
  config.gla.num_heads = 2;
  config.gla.num_kv_heads = 2;
  return config;
}

struct Trainee {
  std::shared_ptr<model::CausalLm> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

// A model and an AdamW that took `steps` steps, so the optimizer has moments to save.
Trainee MakeTrainee(uint64_t seed, int steps, int64_t hidden = 16) {
  Trainee t;
  t.model = model::BuildCausalLm(SmallModel(hidden), seed);
  t.optimizer = BuildOptimizer(OptimizerConfig{}, t.model->parameters());
  for (int i = 0; i < steps; ++i) {
    const torch::Tensor ids = torch::randint(0, 30, {2, 10}, torch::kLong);
    t.optimizer->zero_grad();
    t.model->Forward(ids, ids).loss.backward();
    t.optimizer->step();
  }
  return t;
}

CheckpointState StateAt(int64_t step) {
  CheckpointState state;
  state.train_state = {step, step * 1000, 1, 12.5};
  state.spec_hash = "hash";
  state.world_size = 2;
  state.data_positions = {"{\"rank\":0}", "{\"rank\":1}"};
  return state;
}

void FlipByte(const std::string& path, int64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  char byte = 0;
  file.get(byte);
  file.seekp(offset);
  file.put(static_cast<char>(byte ^ 0x5a));
}

TEST(CheckpointStore, RoundTripsModelOptimizerAndTrainState) {
  TempDir dir;
  CheckpointStore store(dir.path());
  Trainee saved = MakeTrainee(1, 3);
  const absl::StatusOr<CheckpointInfo> info =
      store.Save(StateAt(3), *saved.model, *saved.optimizer);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->step, 3);
  EXPECT_EQ(info->path, store.StepPath(3));
  EXPECT_GT(info->bytes, 0);
  EXPECT_EQ(info->checksum.size(), 8u);

  Trainee loaded = MakeTrainee(2, 0);  // other weights, no optimizer state
  CheckpointState state;
  ASSERT_TRUE(store.Load(3, &state, *loaded.model, *loaded.optimizer).ok());
  EXPECT_EQ(state.train_state.step, 3);
  EXPECT_EQ(state.train_state.tokens, 3000);
  EXPECT_EQ(state.train_state.skipped_steps, 1);
  EXPECT_DOUBLE_EQ(state.train_state.elapsed_seconds, 12.5);
  EXPECT_EQ(state.spec_hash, "hash");
  EXPECT_EQ(state.world_size, 2);
  EXPECT_EQ(state.data_positions, StateAt(3).data_positions);
  auto expected = saved.model->named_parameters();
  for (const auto& item : loaded.model->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  }
  // Identical optimizer state means identical next steps.
  torch::manual_seed(5);
  const torch::Tensor ids = torch::randint(0, 30, {2, 10}, torch::kLong);
  for (Trainee* t : {&saved, &loaded}) {
    t->optimizer->zero_grad();
    t->model->Forward(ids, ids).loss.backward();
    t->optimizer->step();
  }
  expected = saved.model->named_parameters();
  for (const auto& item : loaded.model->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  }
}

TEST(CheckpointStore, SkipsCorruptAndTornCheckpointsForTheNewestValidOne) {
  TempDir dir;
  CheckpointStore store(dir.path());
  Trainee t = MakeTrainee(1, 1);
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(store.Save(StateAt(step), *t.model, *t.optimizer).ok());
  }
  EXPECT_EQ(store.FindNewestValid(), 30);
  FlipByte(store.StepPath(30) + "/model.pt", 100);  // bit rot
  EXPECT_FALSE(store.Verify(30).ok());
  EXPECT_EQ(store.FindNewestValid(), 20);
  fs::remove(store.StepPath(20) + "/manifest.json");  // torn: the manifest is written last
  EXPECT_EQ(store.FindNewestValid(), 10);
  fs::resize_file(store.StepPath(10) + "/optimizer.pt", 10);  // truncated
  EXPECT_EQ(store.FindNewestValid(), std::nullopt);

  Trainee other = MakeTrainee(2, 0);
  CheckpointState state;
  const absl::Status status = store.Load(30, &state, *other.model, *other.optimizer);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
}

TEST(CheckpointStore, RefusesACheckpointOfAModelWithOtherShapes) {
  TempDir dir;
  CheckpointStore store(dir.path());
  Trainee small = MakeTrainee(1, 1, /*hidden=*/16);
  ASSERT_TRUE(store.Save(StateAt(1), *small.model, *small.optimizer).ok());
  Trainee large = MakeTrainee(1, 0, /*hidden=*/32);
  CheckpointState state;
  EXPECT_FALSE(store.Load(1, &state, *large.model, *large.optimizer).ok());
}

TEST(CheckpointStore, PrunesToTheNewestKAndRemovesInterruptedSaves) {
  TempDir dir;
  CheckpointStore store(dir.path());
  Trainee t = MakeTrainee(1, 1);
  for (int64_t step : {1, 2, 3, 4})
    ASSERT_TRUE(store.Save(StateAt(step), *t.model, *t.optimizer).ok());
  ASSERT_TRUE(store.Prune(2).ok());
  EXPECT_EQ(store.ListSteps(), (std::vector<int64_t>{3, 4}));
  // Saving the same step again replaces it whole.
  ASSERT_TRUE(store.Save(StateAt(4), *t.model, *t.optimizer).ok());
  EXPECT_TRUE(store.Verify(4).ok());

  fs::create_directories(dir.path() + "/.step-5.tmp-123");
  ASSERT_TRUE(store.RemoveTemporaries().ok());
  EXPECT_FALSE(fs::exists(dir.path() + "/.step-5.tmp-123"));
  EXPECT_EQ(store.ListSteps(), (std::vector<int64_t>{3, 4}));
}

TEST(CheckpointStore, WeightsOnlyCheckpointsHoldCastWeightsAndAreVerifiedLikeFullOnes) {
  TempDir dir;
  CheckpointStore store(dir.path());
  Trainee saved = MakeTrainee(1, 2);
  const absl::StatusOr<CheckpointInfo> info =
      store.SaveWeightsOnly(StateAt(5), *saved.model, torch::kFloat16);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_TRUE(store.Verify(5).ok());
  EXPECT_FALSE(fs::exists(store.StepPath(5) + "/optimizer.pt"));

  // Only the model and the train state come back; the weights are the f16-rounded ones.
  Trainee loaded = MakeTrainee(2, 0);
  CheckpointState state;
  ASSERT_TRUE(store.Load(5, &state, *loaded.model, *loaded.optimizer).ok());
  EXPECT_EQ(state.kind, CheckpointKind::kWeightsOnly);
  EXPECT_EQ(state.train_state.step, 5);
  EXPECT_TRUE(state.data_positions.empty());
  auto expected = saved.model->named_parameters();
  for (const auto& item : loaded.model->named_parameters()) {
    EXPECT_EQ(item.value().dtype(), torch::kFloat32) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()].to(torch::kHalf).to(torch::kFloat)))
        << item.key();
  }
  FlipByte(store.StepPath(5) + "/model.safetensors", 200);
  EXPECT_FALSE(store.Verify(5).ok());
  EXPECT_EQ(store.FindNewestValid(), std::nullopt);
}

TEST(CheckpointStore, ExcludedComponentsAreLeftAlone) {
  TempDir dir;
  CheckpointStore store(dir.path());
  Trainee saved = MakeTrainee(1, 2);
  ASSERT_TRUE(store.Save(StateAt(2), *saved.model, *saved.optimizer).ok());
  Trainee loaded = MakeTrainee(2, 0);
  const auto before = loaded.model->named_parameters()["lm_head.weight"].clone();
  CheckpointComponents parts;
  parts.model = false;
  CheckpointState state;
  ASSERT_TRUE(CheckpointStore::LoadDirectory(store.StepPath(2), parts, &state, *loaded.model,
                                             loaded.optimizer.get())
                  .ok());
  EXPECT_TRUE(torch::equal(before, loaded.model->named_parameters()["lm_head.weight"]));
  EXPECT_EQ(state.train_state.step, 2);  // the train state is always read, for the caller
}

}  // namespace
}  // namespace flame::worker
