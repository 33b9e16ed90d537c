// JobSpec's defaults and the validation of flame's options (common/job_spec.h).
#include "common/job_spec.h"

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame {
namespace {

using flame::v1::JobSpec;
using ::testing::HasSubstr;

// gMock's StartsWith needs a std::string; Status messages are absl::string_view (Debian's
// abseil does not alias std::string_view).
MATCHER_P(BeginsWith, prefix, "") { return absl::StartsWith(arg, prefix); }

class JobSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/job_spec_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    for (const char* name : {"config.json", "tok.model", "a.jsonl", "b.jsonl", "eval.jsonl"}) {
      ASSERT_TRUE(WriteFileAtomically(dir_ + "/" + name, "x").ok());
    }
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // A resolved spec that validates, changed by `edit` before the defaults go on.
  JobSpec Resolved(const std::function<void(JobSpec*)>& edit = nullptr) const {
    JobSpec spec;
    spec.mutable_model()->set_config(dir_ + "/config.json");
    spec.mutable_model()->set_tokenizer_path(dir_ + "/tok.model");
    spec.mutable_training()->set_dataset(dir_ + "/a.jsonl");
    if (edit) edit(&spec);
    ApplyJobSpecDefaults(&spec);
    return spec;
  }

  std::string dir_;
};

TEST_F(JobSpecTest, EmptySpecResolvesToFlamesDefaults) {
  const JobSpec spec = Resolved();
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(spec.optimizer().implementation(), "fused");
  EXPECT_FALSE(spec.optimizer().early_step_in_backward());
  EXPECT_EQ(spec.profiling().save_traces_folder(), "profile_traces");
  EXPECT_EQ(spec.profiling().profile_freq(), 10);
  EXPECT_EQ(spec.training().prefetch_factor(), 2);
  EXPECT_EQ(spec.training().gc_freq(), 50);
  EXPECT_EQ(spec.training().data_parallel_replicate_degree(), 1);
  EXPECT_EQ(spec.training().data_parallel_shard_degree(), -1);
  EXPECT_EQ(spec.training().mixed_precision_param(), "bfloat16");
  EXPECT_EQ(spec.training().fsdp_reshard_after_forward(), "default");
  EXPECT_FALSE(spec.training().has_data_probs());  // flame's None stays unset
  EXPECT_FALSE(spec.training().has_dataset_name());
  EXPECT_TRUE(spec.checkpoint().initial_load_model_weights_only());
  EXPECT_FALSE(spec.checkpoint().has_initial_load_path());
  EXPECT_EQ(spec.checkpoint().export_dtype(), "float32");
  EXPECT_EQ(spec.checkpoint().async_mode(), "disabled");
  EXPECT_EQ(spec.metrics().save_tb_folder(), "tb");
  EXPECT_EQ(spec.metrics().eval_interval(), 0);
  EXPECT_EQ(spec.metrics().eval_steps(), 8);
  EXPECT_EQ(spec.experimental().pipeline_parallel_schedule(), "1F1B");
  EXPECT_FALSE(spec.experimental().has_pipeline_parallel_microbatches());
  EXPECT_EQ(spec.activation_checkpoint().mode(), "selective");
  EXPECT_EQ(spec.activation_checkpoint().selective_ac_option(), "2");
  EXPECT_EQ(spec.activation_offload().mode(), "none");
  EXPECT_FALSE(spec.float8().has_recipe_name());
  EXPECT_EQ(spec.comm().init_timeout_seconds(), 300);
  EXPECT_EQ(spec.comm().train_timeout_seconds(), 100);
  EXPECT_EQ(spec.comm().trace_buf_size(), 20000);
  EXPECT_EQ(spec.fault_tolerance().min_replica_size(), 1);
}

TEST_F(JobSpecTest, ValuesTheUserSetAreKept) {
  const JobSpec spec = Resolved([](JobSpec* s) {
    s->mutable_training()->set_data_parallel_shard_degree(1);
    s->mutable_profiling()->set_profile_freq(512);
    s->mutable_checkpoint()->set_initial_load_model_weights_only(false);
  });
  EXPECT_EQ(spec.training().data_parallel_shard_degree(), 1);
  EXPECT_EQ(spec.profiling().profile_freq(), 512);
  EXPECT_FALSE(spec.checkpoint().initial_load_model_weights_only());
}

TEST_F(JobSpecTest, DataParallelDegreesMustCoverTheRanks) {
  const auto check = [this](int ranks, int64_t replicate, int64_t shard) {
    return ValidateJobSpec(Resolved([&](JobSpec* s) {
      s->mutable_resources()->set_ranks(ranks);
      s->mutable_training()->set_data_parallel_replicate_degree(replicate);
      s->mutable_training()->set_data_parallel_shard_degree(shard);
    }));
  };
  EXPECT_TRUE(check(4, 1, -1).ok());
  EXPECT_TRUE(check(4, 2, -1).ok());
  EXPECT_TRUE(check(4, 2, 2).ok());
  EXPECT_TRUE(check(4, 4, 1).ok());
  EXPECT_THAT(check(4, 3, -1).message(),
              BeginsWith("training.data_parallel_shard_degree x "
                         "training.data_parallel_replicate_degree must equal resources.ranks"));
  EXPECT_THAT(check(4, 2, 4).message(), HasSubstr("got 4 x 2 for 4 ranks"));
  EXPECT_THAT(check(4, 0, -1).message(), BeginsWith("training.data_parallel_replicate_degree"));
  EXPECT_THAT(check(4, 1, 0).message(), BeginsWith("training.data_parallel_shard_degree"));
}

TEST_F(JobSpecTest, DataProbsNeedOnePositiveWeightPerDatasetWhenThereAreSeveral) {
  const auto check = [this](const std::string& datasets, const std::string& probs) {
    return ValidateJobSpec(Resolved([&](JobSpec* s) {
      s->mutable_training()->set_dataset(datasets);
      s->mutable_training()->set_data_probs(probs);
    }));
  };
  const std::string two = dir_ + "/a.jsonl," + dir_ + "/b.jsonl";
  EXPECT_TRUE(check(two, "0.7,0.3").ok());
  EXPECT_TRUE(check(two, "3, 1").ok());
  EXPECT_THAT(check(two, "1").message(),
              HasSubstr("training.data_probs has 1 entries but training.dataset names 2"));
  EXPECT_THAT(check(two, "0.5,-1").message(), HasSubstr("must be positive numbers"));
  EXPECT_THAT(check(two, "0.5,x").message(), HasSubstr("(got \"x\")"));
  EXPECT_THAT(check(two, "0.5,0").message(), HasSubstr("(got \"0\")"));
  EXPECT_THAT(check(two, "").message(),
              HasSubstr("training.data_probs is required when training.dataset names more than one"));
  EXPECT_TRUE(check(dir_ + "/a.jsonl", "").ok());
}

TEST_F(JobSpecTest, AHubDatasetIdIsExplained) {
  const absl::Status status = ValidateJobSpec(Resolved([](JobSpec* s) {
    s->mutable_training()->set_dataset("/nowhere/HuggingFaceFW/fineweb-edu");
  }));
  EXPECT_THAT(status.message(), BeginsWith("training.dataset names a missing file"));
  EXPECT_THAT(status.message(), HasSubstr("Hugging Face hub ids are not supported"));
}

TEST_F(JobSpecTest, EvaluationNeedsItsDatasetWhenEnabled) {
  EXPECT_THAT(ValidateJobSpec(Resolved([](JobSpec* s) {
                s->mutable_metrics()->set_eval_interval(50);
              })).message(),
              BeginsWith("metrics.eval_dataset is required when metrics.eval_interval is set"));
  EXPECT_TRUE(ValidateJobSpec(Resolved([this](JobSpec* s) {
                s->mutable_metrics()->set_eval_interval(50);
                s->mutable_metrics()->set_eval_dataset(dir_ + "/eval.jsonl");
              })).ok());
  EXPECT_THAT(ValidateJobSpec(Resolved([](JobSpec* s) {
                s->mutable_metrics()->set_eval_steps(0);
              })).message(),
              BeginsWith("metrics.eval_steps must be positive"));
}

TEST_F(JobSpecTest, CheckpointOptionsTakeFlamesValues) {
  const auto check = [this](const std::function<void(flame::v1::CheckpointSection*)>& edit) {
    return ValidateJobSpec(Resolved([&](JobSpec* s) { edit(s->mutable_checkpoint()); }));
  };
  EXPECT_TRUE(check([](auto* c) { c->set_exclude_from_loading("optimizer, dataloader"); }).ok());
  EXPECT_THAT(check([](auto* c) { c->set_exclude_from_loading("model,weights"); }).message(),
              BeginsWith("checkpoint.exclude_from_loading must be one of model, optimizer"));
  EXPECT_THAT(check([](auto* c) { c->set_export_dtype("int8"); }).message(),
              BeginsWith("checkpoint.export_dtype must be one of float16, bfloat16, float32"));
  EXPECT_THAT(check([](auto* c) { c->set_initial_load_path("/no/such/step-10"); }).message(),
              BeginsWith("checkpoint.initial_load_path names a missing file"));
  EXPECT_TRUE(check([this](auto* c) { c->set_initial_load_path(dir_); }).ok());
  EXPECT_THAT(ValidateJobSpec(Resolved([](JobSpec* s) {
                s->mutable_checkpoint()->set_create_seed_checkpoint(true);
                s->mutable_resources()->set_ranks(2);
              })).message(),
              BeginsWith("checkpoint.create_seed_checkpoint needs resources.ranks = 1"));
}

TEST_F(JobSpecTest, CommTimeoutsMustBePositive) {
  EXPECT_THAT(ValidateJobSpec(Resolved([](JobSpec* s) {
                s->mutable_comm()->set_train_timeout_seconds(0);
              })).message(),
              BeginsWith("comm.train_timeout_seconds must be positive"));
}

}  // namespace
}  // namespace flame
