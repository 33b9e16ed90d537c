#include "client/spec_fields.h"

#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(SpecFields, EveryKeyComesFromTheJobSpecProto) {
  const std::vector<std::string> keys = AllSpecKeys();
  EXPECT_THAT(keys, Contains("training.steps"));
  EXPECT_THAT(keys, Contains("lr_scheduler.warmup_steps"));
  EXPECT_THAT(keys, Contains("resources.ranks"));
  EXPECT_THAT(keys, Contains("job.dump_folder"));
  for (const std::string& key : keys) {
    const std::vector<std::string> parts = absl::StrSplit(key, '.');
    ASSERT_EQ(parts.size(), 2u) << key;
    EXPECT_TRUE(FindSpecKey(parts[0], parts[1]).ok()) << key;
  }
}

// flame's JobConfig (reference/flame.md §1): its 101 command-line options, the two keys that
// only a TOML can set (pin_memory, persistent_workers) and the two stale keys of its fla.toml.
// Each one must be a key here: none is refused as a typo.
TEST(SpecFields, EveryFlameOptionIsAKey) {
  constexpr const char* kFlameOptions[] = {
      "job.config_file", "job.dump_folder", "job.description", "job.use_for_integration_test",
      "job.print_args", "model.name", "model.config", "model.tokenizer_path", "model.converters",
      "model.print_after_conversion", "profiling.enable_profiling", "profiling.save_traces_folder",
      "profiling.profile_freq", "profiling.enable_memory_snapshot",
      "profiling.save_memory_snapshot_folder", "optimizer.name", "optimizer.eps", "optimizer.lr",
      "optimizer.beta1", "optimizer.beta2", "optimizer.weight_decay", "optimizer.implementation",
      "optimizer.early_step_in_backward", "lr_scheduler.warmup_steps", "lr_scheduler.decay_ratio",
      "lr_scheduler.decay_type", "lr_scheduler.lr_min", "training.batch_size", "training.seq_len",
      "training.context_len", "training.varlen", "training.gradient_accumulation_steps",
      "training.steps", "training.max_norm", "training.skip_nan_inf", "training.dataset",
      "training.dataset_name", "training.dataset_split", "training.data_dir", "training.data_files",
      "training.data_probs", "training.streaming", "training.num_workers",
      "training.prefetch_factor", "training.data_parallel_replicate_degree",
      "training.data_parallel_shard_degree", "training.enable_cpu_offload",
      "training.tensor_parallel_degree", "training.disable_loss_parallel",
      "training.fsdp_reshard_after_forward", "training.mixed_precision_param",
      "training.mixed_precision_reduce", "training.compile", "training.gc_freq", "training.seed",
      "training.deterministic", "training.pin_memory", "training.persistent_workers",
      "metrics.log_freq", "metrics.enable_tensorboard", "metrics.disable_color_printing",
      "metrics.save_tb_folder", "metrics.save_for_all_ranks", "metrics.enable_wandb",
      "experimental.enable_async_tensor_parallel", "experimental.pipeline_parallel_degree",
      "experimental.pipeline_parallel_split_points", "experimental.pipeline_parallel_schedule",
      "experimental.pipeline_parallel_schedule_csv", "experimental.pipeline_parallel_microbatches",
      "experimental.enable_compiled_autograd", "experimental.context_parallel_degree",
      "experimental.context_parallel_rotate_method", "experimental.custom_model_path",
      "checkpoint.enable_checkpoint", "checkpoint.folder", "checkpoint.initial_load_path",
      "checkpoint.initial_load_model_weights_only", "checkpoint.no_initial_load_model_weights_only",
      "checkpoint.interval", "checkpoint.last_save_model_weights_only", "checkpoint.export_dtype",
      "checkpoint.create_seed_checkpoint", "checkpoint.async_mode", "checkpoint.keep_latest_k",
      "checkpoint.load_step", "checkpoint.exclude_from_loading", "checkpoint.interval_type",
      "checkpoint.model_weights_only", "activation_checkpoint.mode",
      "activation_checkpoint.selective_ac_option", "activation_offload.mode",
      "float8.enable_fsdp_float8_all_gather", "float8.precompute_float8_dynamic_scale_for_fsdp",
      "float8.force_recompute_fp8_weight_in_bwd", "float8.recipe_name", "comm.init_timeout_seconds",
      "comm.train_timeout_seconds", "comm.trace_buf_size", "memory_estimation.enabled",
      "memory_estimation.disable_fake_mode", "fault_tolerance.enable", "fault_tolerance.replica_id",
      "fault_tolerance.group_size", "fault_tolerance.min_replica_size",
  };
  EXPECT_EQ(std::size(kFlameOptions), 105u);
  const std::vector<std::string> keys = AllSpecKeys();
  for (const std::string key : kFlameOptions) {
    const std::vector<std::string> parts = absl::StrSplit(key, '.');
    EXPECT_TRUE(FindSpecKey(parts[0], parts[1]).ok()) << key;
    EXPECT_THAT(keys, Contains(key));
  }
}

TEST(SpecFields, TheStoreFalseAliasSetsTheOppositeValue) {
  absl::StatusOr<SpecKey> alias = FindSpecKey("checkpoint", "no_initial_load_model_weights_only");
  ASSERT_TRUE(alias.ok()) << alias.status();
  EXPECT_EQ(alias->FullName(), "checkpoint.no_initial_load_model_weights_only");
  flame::v1::JobSpec spec;
  ASSERT_TRUE(SetSpecValue(*alias, SpecValue(true), "/", &spec).ok());
  EXPECT_FALSE(spec.checkpoint().initial_load_model_weights_only());
  ASSERT_TRUE(SetSpecValue(*alias, SpecValue(false), "/", &spec).ok());
  EXPECT_TRUE(spec.checkpoint().initial_load_model_weights_only());
}

TEST(SpecFields, ExpectedTypesFollowTheProtoFieldTypes) {
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("training", "steps")), "an integer");
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("resources", "ranks")), "an integer");
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("optimizer", "lr")), "a number");
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("training", "varlen")), "a boolean");
  EXPECT_EQ(ExpectedTypeName(*FindSpecKey("model", "config")), "a string");
}

TEST(SpecFields, PathKeysAreTheOnesNamingLocalFiles) {
  for (const auto& [section, key] : std::vector<std::pair<std::string, std::string>>{
           {"model", "config"},
           {"model", "tokenizer_path"},
           {"training", "dataset"},
           {"job", "dump_folder"},
           {"job", "config_file"},
           {"checkpoint", "initial_load_path"},
           {"metrics", "eval_dataset"}}) {
    EXPECT_TRUE(IsPathKey(*FindSpecKey(section, key))) << section << "." << key;
  }
  // Folders under job.dump_folder are relative to it, not to the job file.
  EXPECT_FALSE(IsPathKey(*FindSpecKey("checkpoint", "folder")));
  EXPECT_FALSE(IsPathKey(*FindSpecKey("metrics", "save_tb_folder")));
  EXPECT_FALSE(IsPathKey(*FindSpecKey("profiling", "save_traces_folder")));
  EXPECT_FALSE(IsPathKey(*FindSpecKey("model", "name")));
}

TEST(SpecFields, ListKeysAreFlamesStringLists) {
  EXPECT_TRUE(IsListKey(*FindSpecKey("model", "converters")));
  EXPECT_TRUE(IsListKey(*FindSpecKey("training", "data_probs")));
  EXPECT_TRUE(IsListKey(*FindSpecKey("checkpoint", "exclude_from_loading")));
  EXPECT_FALSE(IsListKey(*FindSpecKey("training", "steps")));
}

TEST(SpecFields, NonFiniteNumbersAreRefused) {
  flame::v1::JobSpec spec;
  const SpecKey lr = *FindSpecKey("optimizer", "lr");
  EXPECT_THAT(
      SetSpecValue(lr, SpecValue(std::numeric_limits<double>::infinity()), "/", &spec).message(),
      HasSubstr("optimizer.lr must be a finite number"));
  EXPECT_FALSE(spec.optimizer().has_lr());
}

TEST(SpecFields, AnIntegerIsAcceptedWhereANumberIsExpected) {
  flame::v1::JobSpec spec;
  ASSERT_TRUE(
      SetSpecValue(*FindSpecKey("optimizer", "lr"), SpecValue(int64_t{2}), "/", &spec).ok());
  EXPECT_DOUBLE_EQ(spec.optimizer().lr(), 2.0);
}

}  // namespace
}  // namespace flame::client
