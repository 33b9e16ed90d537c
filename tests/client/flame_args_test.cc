// flame's command-line form of `flamectl submit` (client/flame_args.h): how arguments are split
// from flamectl's own, parsed and applied, and that every flame option this service refuses
// says so by name.
#include "client/flame_args.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// gMock's StartsWith needs a std::string; Status messages are absl::string_view (Debian's
// abseil does not alias std::string_view).
MATCHER_P(BeginsWith, prefix, "") { return absl::StartsWith(arg, prefix); }

TEST(SplitFlameArguments, TakesDottedOptionsAndTheirValuesAfterSubmit) {
  const SplitCommandLine split = SplitFlameArguments(
      {"flamectl", "--data-dir", "d", "submit", "job.toml", "--training.steps", "5", "--set",
       "optimizer.lr=1", "--training.varlen", "-o", "json", "--checkpoint.load_step", "-1",
       "--optimizer.eps=1e-15", "--training.skip_nan_inf", "false"});
  EXPECT_THAT(split.own, ElementsAre("flamectl", "--data-dir", "d", "submit", "job.toml", "--set",
                                     "optimizer.lr=1", "-o", "json"));
  EXPECT_THAT(split.flame,
              ElementsAre("--training.steps", "5", "--training.varlen", "--checkpoint.load_step",
                          "-1", "--optimizer.eps=1e-15", "--training.skip_nan_inf", "false"));
}

TEST(SplitFlameArguments, EverythingAfterADoubleDashIsFlames) {
  const SplitCommandLine split =
      SplitFlameArguments({"flamectl", "submit", "--name", "x", "--", "--job.config_file",
                           "fla.toml", "--training.compile"});
  EXPECT_THAT(split.own, ElementsAre("flamectl", "submit", "--name", "x"));
  EXPECT_THAT(split.flame, ElementsAre("--job.config_file", "fla.toml", "--training.compile"));
}

TEST(SplitFlameArguments, OtherCommandsAreLeftAlone) {
  const SplitCommandLine split = SplitFlameArguments({"flamectl", "status", "--a.b", "j-1"});
  EXPECT_THAT(split.own, ElementsAre("flamectl", "status", "--a.b", "j-1"));
  EXPECT_TRUE(split.flame.empty());
}

TEST(ParseFlameArguments, FlagsAloneMeanTrueAndValuesMayFollowOrBeInline) {
  absl::StatusOr<FlameArguments> parsed =
      ParseFlameArguments({"--job.config_file", "fla.toml", "--training.varlen", "--training.steps",
                           "100", "--optimizer.lr=1e-3", "--training.compile", "false",
                           "--checkpoint.no_initial_load_model_weights_only"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->config_file, "fla.toml");
  ASSERT_EQ(parsed->overrides.size(), 5u);
  EXPECT_EQ(parsed->overrides[0].key, "training.varlen");
  EXPECT_FALSE(parsed->overrides[0].value.has_value());
  EXPECT_EQ(parsed->overrides[1].value, "100");
  EXPECT_EQ(parsed->overrides[2].value, "1e-3");
  EXPECT_EQ(parsed->overrides[3].value, "false");
  EXPECT_EQ(parsed->overrides[4].key, "checkpoint.no_initial_load_model_weights_only");
}

TEST(ParseFlameArguments, UnknownKeysSuggestTheKnownOne) {
  EXPECT_EQ(ParseFlameArguments({"--training.stpes", "5"}).status().message(),
            "--training.stpes: unknown key training.stpes (did you mean training.steps?)");
  EXPECT_EQ(ParseFlameArguments({"--training.lr", "5"}).status().message(),
            "--training.lr: unknown key training.lr (did you mean optimizer.lr?)");
  EXPECT_THAT(ParseFlameArguments({"--trainng.steps", "5"}).status().message(),
              HasSubstr("unknown section [trainng] (did you mean [training]?)"));
}

TEST(ParseFlameArguments, MissingValuesAndStrayWordsAreUsageErrors) {
  EXPECT_EQ(ParseFlameArguments({"--training.steps"}).status().message(),
            "--training.steps: needs a value (an integer)");
  EXPECT_EQ(ParseFlameArguments({"--training.steps", "--training.varlen"}).status().message(),
            "--training.steps: needs a value (an integer)");
  EXPECT_THAT(ParseFlameArguments({"--training.varlen", "yes"}).status().message(),
              BeginsWith("unexpected argument \"yes\""));
  EXPECT_THAT(ParseFlameArguments({"--job.config_file"}).status().message(),
              HasSubstr("needs the path of a TOML job file"));
}

TEST(ApplyFlameArguments, SetsTypedValuesAndTheStoreFalseAlias) {
  absl::StatusOr<FlameArguments> parsed = ParseFlameArguments(
      {"--training.varlen", "--training.steps", "100", "--model.converters", "",
       "--checkpoint.no_initial_load_model_weights_only", "--training.dataset", "a.jsonl,b.jsonl",
       "--checkpoint.exclude_from_loading", "optimizer,dataloader"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  flame::v1::JobSpec spec;
  ASSERT_TRUE(ApplyFlameArguments(*parsed, "/work", &spec).ok());
  EXPECT_TRUE(spec.training().varlen());
  EXPECT_EQ(spec.training().steps(), 100);
  EXPECT_TRUE(spec.checkpoint().has_initial_load_model_weights_only());
  EXPECT_FALSE(spec.checkpoint().initial_load_model_weights_only());
  EXPECT_EQ(spec.training().dataset(), "/work/a.jsonl,/work/b.jsonl");
  EXPECT_EQ(spec.checkpoint().exclude_from_loading(), "optimizer,dataloader");

  parsed = ParseFlameArguments({"--training.steps", "many"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(ApplyFlameArguments(*parsed, "/work", &spec).message(),
            "--training.steps: training.steps must be an integer (got \"many\")");
}

TEST(ApplyNgpu, SetsTheRanksOnlyWhenNothingElseDid) {
  flame::v1::JobSpec spec;
  ASSERT_TRUE(ApplyNgpu(std::nullopt, &spec).ok());
  EXPECT_FALSE(spec.resources().has_ranks());
  ASSERT_TRUE(ApplyNgpu("2", &spec).ok());
  EXPECT_EQ(spec.resources().ranks(), 2);
  ASSERT_TRUE(ApplyNgpu("8", &spec).ok());
  EXPECT_EQ(spec.resources().ranks(), 2);
  flame::v1::JobSpec other;
  EXPECT_THAT(ApplyNgpu("eight", &other).message(), BeginsWith("NGPU must be a positive integer"));
  EXPECT_THAT(ApplyNgpu("0", &other).message(), BeginsWith("NGPU must be a positive integer"));
}

// BuildJobSpec with real files: a job file, a model config, a tokenizer and two datasets.
class SubmitArgumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/flame_args_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = std::filesystem::path(pattern).lexically_normal().string();
    for (const char* name : {"gla.json", "tok.model", "a.jsonl", "b.jsonl"}) {
      ASSERT_TRUE(WriteFileAtomically(Path(name), "x").ok());
    }
    ASSERT_TRUE(WriteFileAtomically(Path("job.toml"), R"(
[model]
config = "gla.json"
tokenizer_path = "tok.model"
[optimizer]
lr = 3e-4
[training]
steps = 40
seq_len = 128
dataset = "a.jsonl"
)")
                    .ok());
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  absl::StatusOr<flame::v1::JobSpec> Build(std::vector<std::string> flame_args,
                                           std::vector<std::string> overrides = {}) const {
    SubmitOptions options;
    options.flame_args = {"--job.config_file", Path("job.toml")};
    options.flame_args.insert(options.flame_args.end(), flame_args.begin(), flame_args.end());
    options.overrides = std::move(overrides);
    return BuildJobSpec(options);
  }

  std::string dir_;
};

TEST_F(SubmitArgumentsTest, CommandLineWinsOverTheFileAndSetWinsLast) {
  absl::StatusOr<flame::v1::JobSpec> spec =
      Build({"--training.steps", "100", "--optimizer.lr", "1e-3", "--training.seq_len", "64"},
            {"training.seq_len=32"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().steps(), 100);
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 1e-3);
  EXPECT_EQ(spec->training().seq_len(), 32);
  EXPECT_EQ(spec->training().dataset(), Path("a.jsonl"));  // from the file, made absolute
  EXPECT_EQ(spec->job().config_file(), Path("job.toml"));
  EXPECT_FALSE(spec->training().has_batch_size());  // left for flamed's defaults
}

TEST_F(SubmitArgumentsTest, AJobFileIsNamedOnce) {
  SubmitOptions options;
  options.job_file = Path("job.toml");
  options.flame_args = {"--job.config_file", Path("job.toml")};
  EXPECT_THAT(BuildJobSpec(options).status().message(), BeginsWith("two job files"));
  EXPECT_THAT(BuildJobSpec(SubmitOptions()).status().message(),
              BeginsWith("submit needs a job file"));
}

TEST_F(SubmitArgumentsTest, NgpuSetsTheRanksOfAFlameStyleSubmit) {
  SubmitOptions options;
  options.flame_args = {"--job.config_file", Path("job.toml")};
  options.ngpu = "2";
  absl::StatusOr<flame::v1::JobSpec> spec = BuildJobSpec(options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resources().ranks(), 2);
  options.flame_args.insert(options.flame_args.end(), {"--resources.ranks", "1"});
  spec = BuildJobSpec(options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resources().ranks(), 1);
}

TEST_F(SubmitArgumentsTest, FlamesDocumentedCommandIsAccepted) {
  // The README command of flame, with local files in place of the hub ids.
  absl::StatusOr<flame::v1::JobSpec> spec = Build({"--model.config",
                                                   Path("gla.json"),
                                                   "--model.tokenizer_path",
                                                   Path("tok.model"),
                                                   "--optimizer.name",
                                                   "AdamW",
                                                   "--optimizer.eps",
                                                   "1e-15",
                                                   "--optimizer.lr",
                                                   "1e-3",
                                                   "--lr_scheduler.warmup_steps",
                                                   "1024",
                                                   "--lr_scheduler.lr_min",
                                                   "0.1",
                                                   "--lr_scheduler.decay_type",
                                                   "cosine",
                                                   "--training.batch_size",
                                                   "1",
                                                   "--training.seq_len",
                                                   "65536",
                                                   "--training.context_len",
                                                   "4096",
                                                   "--training.varlen",
                                                   "--training.gradient_accumulation_steps",
                                                   "1",
                                                   "--training.steps",
                                                   "20480",
                                                   "--training.max_norm",
                                                   "1.0",
                                                   "--training.skip_nan_inf",
                                                   "--training.dataset",
                                                   Path("a.jsonl") + "," + Path("b.jsonl"),
                                                   "--training.data_probs",
                                                   "0.6,0.4",
                                                   "--training.dataset_name",
                                                   "default",
                                                   "--training.dataset_split",
                                                   "train",
                                                   "--training.num_workers",
                                                   "32",
                                                   "--training.prefetch_factor",
                                                   "2",
                                                   "--training.seed",
                                                   "42",
                                                   "--training.compile",
                                                   "--checkpoint.interval",
                                                   "2048",
                                                   "--checkpoint.load_step",
                                                   "-1",
                                                   "--checkpoint.keep_latest_k",
                                                   "2",
                                                   "--metrics.log_freq",
                                                   "1"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->training().compile());
  EXPECT_EQ(spec->training().data_probs(), "0.6,0.4");
  EXPECT_EQ(spec->checkpoint().load_step(), -1);
}

// Every flame option this service refuses, or accepts only at one value, with the start of its
// error: the key first, then what was wrong.
TEST_F(SubmitArgumentsTest, EachRefusedOptionNamesItself) {
  const struct {
    std::vector<std::string> args;
    std::string error;
  } kCases[] = {
      {{"--training.dataset", "HuggingFaceFW/fineweb-edu"},
       "training.dataset names a missing file"},
      {{"--training.dataset_name", "sample-100BT"},
       "training.dataset_name must be unset or \"default\" (got \"sample-100BT\")"},
      {{"--training.dataset_split", "validation"},
       "training.dataset_split must be unset or \"train\" (got \"validation\")"},
      {{"--training.data_dir", "data"},
       "training.data_dir is a flame option this service does not support"},
      {{"--training.data_files", "a.parquet"},
       "training.data_files is a flame option this service does not support"},
      {{"--training.tensor_parallel_degree", "2"},
       "training.tensor_parallel_degree must be 1 (got 2)"},
      {{"--experimental.pipeline_parallel_degree", "2"},
       "experimental.pipeline_parallel_degree must be 1 (got 2)"},
      {{"--experimental.context_parallel_degree", "4"},
       "experimental.context_parallel_degree must be 1 (got 4)"},
      {{"--training.data_parallel_replicate_degree", "2"},
       "training.data_parallel_shard_degree x training.data_parallel_replicate_degree must "
       "equal resources.ranks"},
      {{"--training.data_parallel_shard_degree", "2"},
       "training.data_parallel_shard_degree x training.data_parallel_replicate_degree must "
       "equal resources.ranks"},
      {{"--training.enable_cpu_offload"}, "training.enable_cpu_offload must be false (got true)"},
      {{"--training.mixed_precision_param", "float32"},
       "training.mixed_precision_param must be \"bfloat16\" (got \"float32\")"},
      {{"--training.mixed_precision_reduce", "bfloat16"},
       "training.mixed_precision_reduce must be \"float32\" (got \"bfloat16\")"},
      {{"--model.converters", "float8"}, "model.converters must be empty (got \"float8\")"},
      {{"--float8.enable_fsdp_float8_all_gather"},
       "float8.enable_fsdp_float8_all_gather must be false (got true)"},
      {{"--float8.precompute_float8_dynamic_scale_for_fsdp"},
       "float8.precompute_float8_dynamic_scale_for_fsdp must be false (got true)"},
      {{"--float8.force_recompute_fp8_weight_in_bwd"},
       "float8.force_recompute_fp8_weight_in_bwd must be false (got true)"},
      {{"--float8.recipe_name", "rowwise"}, "float8.recipe_name must be unset (got \"rowwise\")"},
      {{"--activation_offload.mode", "full"},
       "activation_offload.mode must be \"none\" (got \"full\")"},
      {{"--experimental.custom_model_path", "custom_models/sba"},
       "experimental.custom_model_path must be empty (got \"custom_models/sba\")"},
      {{"--fault_tolerance.enable"}, "fault_tolerance.enable must be false (got true)"},
      {{"--optimizer.early_step_in_backward"},
       "optimizer.early_step_in_backward must be false (got true)"},
      {{"--profiling.enable_memory_snapshot"},
       "profiling.enable_memory_snapshot must be false (got true)"},
      {{"--optimizer.implementation", "apex"}, "optimizer.implementation must be one of"},
      {{"--training.fsdp_reshard_after_forward", "sometimes"},
       "training.fsdp_reshard_after_forward must be one of default, always, never"},
      {{"--activation_checkpoint.mode", "partial"}, "activation_checkpoint.mode must be one of"},
      {{"--activation_checkpoint.selective_ac_option", "every"},
       "activation_checkpoint.selective_ac_option must be \"op\" or a positive integer"},
      {{"--checkpoint.async_mode", "background"}, "checkpoint.async_mode must be one of"},
      {{"--experimental.context_parallel_rotate_method", "ring"},
       "experimental.context_parallel_rotate_method must be one of allgather, alltoall"},
  };
  for (const auto& c : kCases) {
    const absl::StatusOr<flame::v1::JobSpec> spec = Build(c.args);
    ASSERT_FALSE(spec.ok()) << c.args[0];
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_THAT(spec.status().message(), BeginsWith(c.error)) << c.args[0];
  }
}

// Options accepted because they cannot change what is trained take any valid value.
TEST_F(SubmitArgumentsTest, ImplementationChoicesAreAccepted) {
  absl::StatusOr<flame::v1::JobSpec> spec = Build({"--job.use_for_integration_test",
                                                   "--optimizer.implementation",
                                                   "foreach",
                                                   "--training.gc_freq",
                                                   "10",
                                                   "--training.pin_memory",
                                                   "--training.persistent_workers",
                                                   "--training.compile",
                                                   "--training.fsdp_reshard_after_forward",
                                                   "never",
                                                   "--training.disable_loss_parallel",
                                                   "--metrics.disable_color_printing",
                                                   "--checkpoint.async_mode",
                                                   "async",
                                                   "--checkpoint.interval_type",
                                                   "steps",
                                                   "--checkpoint.model_weights_only",
                                                   "--experimental.pipeline_parallel_schedule",
                                                   "Interleaved1F1B",
                                                   "--experimental.pipeline_parallel_microbatches",
                                                   "4",
                                                   "--comm.trace_buf_size",
                                                   "0",
                                                   "--memory_estimation.enabled",
                                                   "--memory_estimation.disable_fake_mode",
                                                   "--activation_checkpoint.mode",
                                                   "full",
                                                   "--training.streaming",
                                                   "--model.print_after_conversion",
                                                   "--experimental.enable_compiled_autograd",
                                                   "--fault_tolerance.group_size",
                                                   "2"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().async_mode(), "async");
  EXPECT_EQ(spec->experimental().pipeline_parallel_microbatches(), 4);
}

}  // namespace
}  // namespace flame::client
