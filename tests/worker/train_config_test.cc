// JobSpec -> TrainConfig, and TrainConfig's own checks.
#include "worker/config/train_config.h"

#include <gtest/gtest.h>

#include "common/job_spec.h"
#include "worker/config/spec_conversion.h"

namespace flame::worker {
namespace {

TEST(TrainConfig, DefaultsEqualTheResolvedDefaultsOfAnEmptyJobSpec) {
  // TrainConfig's member defaults must stay in step with common/job_spec.cc.
  flame::v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  const TrainConfig converted = TrainConfigFromSpec(spec);
  const TrainConfig defaults;
  EXPECT_EQ(converted.description, defaults.description);
  EXPECT_EQ(converted.model_name, defaults.model_name);
  EXPECT_EQ(converted.optimizer.name, defaults.optimizer.name);
  EXPECT_DOUBLE_EQ(converted.optimizer.lr, defaults.optimizer.lr);
  EXPECT_DOUBLE_EQ(converted.optimizer.eps, defaults.optimizer.eps);
  EXPECT_DOUBLE_EQ(converted.optimizer.beta1, defaults.optimizer.beta1);
  EXPECT_DOUBLE_EQ(converted.optimizer.beta2, defaults.optimizer.beta2);
  EXPECT_DOUBLE_EQ(converted.optimizer.weight_decay, defaults.optimizer.weight_decay);
  EXPECT_EQ(converted.lr_scheduler.warmup_steps, defaults.lr_scheduler.warmup_steps);
  EXPECT_EQ(converted.lr_scheduler.decay_ratio, defaults.lr_scheduler.decay_ratio);
  EXPECT_EQ(converted.lr_scheduler.decay_type, defaults.lr_scheduler.decay_type);
  EXPECT_DOUBLE_EQ(converted.lr_scheduler.lr_min, defaults.lr_scheduler.lr_min);
  const TrainingConfig &t = converted.training, &d = defaults.training;
  EXPECT_EQ(t.batch_size, d.batch_size);
  EXPECT_EQ(t.seq_len, d.seq_len);
  EXPECT_EQ(t.context_len, d.context_len);
  EXPECT_EQ(t.varlen, d.varlen);
  EXPECT_EQ(t.gradient_accumulation_steps, d.gradient_accumulation_steps);
  EXPECT_EQ(t.steps, d.steps);
  EXPECT_DOUBLE_EQ(t.max_norm, d.max_norm);
  EXPECT_EQ(t.skip_nan_inf, d.skip_nan_inf);
  EXPECT_EQ(t.seed, d.seed);
  EXPECT_EQ(t.num_workers, d.num_workers);
  EXPECT_EQ(converted.checkpoint.enable_checkpoint, defaults.checkpoint.enable_checkpoint);
  EXPECT_EQ(converted.checkpoint.folder, defaults.checkpoint.folder);
  EXPECT_EQ(converted.checkpoint.interval, defaults.checkpoint.interval);
  EXPECT_EQ(converted.checkpoint.keep_latest_k, defaults.checkpoint.keep_latest_k);
  EXPECT_EQ(converted.checkpoint.load_step, defaults.checkpoint.load_step);
  EXPECT_EQ(t.data_probs, d.data_probs);
  const CheckpointConfig &c = converted.checkpoint, &cd = defaults.checkpoint;
  EXPECT_EQ(c.initial_load_path, cd.initial_load_path);
  EXPECT_EQ(c.initial_load_model_weights_only, cd.initial_load_model_weights_only);
  EXPECT_EQ(c.last_save_model_weights_only, cd.last_save_model_weights_only);
  EXPECT_EQ(c.export_dtype, cd.export_dtype);
  EXPECT_EQ(c.create_seed_checkpoint, cd.create_seed_checkpoint);
  EXPECT_EQ(c.exclude_from_loading, cd.exclude_from_loading);
  const MetricsConfig &m = converted.metrics, &md = defaults.metrics;
  EXPECT_EQ(m.log_freq, md.log_freq);
  EXPECT_EQ(m.enable_tensorboard, md.enable_tensorboard);
  EXPECT_EQ(m.save_tb_folder, md.save_tb_folder);
  EXPECT_EQ(m.save_for_all_ranks, md.save_for_all_ranks);
  EXPECT_EQ(m.enable_wandb, md.enable_wandb);
  EXPECT_EQ(m.eval_interval, md.eval_interval);
  EXPECT_EQ(m.eval_dataset, md.eval_dataset);
  EXPECT_EQ(m.eval_steps, md.eval_steps);
  EXPECT_EQ(converted.profiling.enable_profiling, defaults.profiling.enable_profiling);
  EXPECT_EQ(converted.profiling.save_traces_folder, defaults.profiling.save_traces_folder);
  EXPECT_EQ(converted.profiling.profile_freq, defaults.profiling.profile_freq);
  EXPECT_EQ(converted.comm.init_timeout_seconds, defaults.comm.init_timeout_seconds);
  EXPECT_EQ(converted.comm.train_timeout_seconds, defaults.comm.train_timeout_seconds);
  EXPECT_EQ(converted.device, defaults.device);
}

TEST(TrainConfig, CopiesEverySetFieldAndSplitsTheDatasetList) {
  flame::v1::JobSpec spec;
  spec.mutable_job()->set_dump_folder("/d");
  spec.mutable_model()->set_config("/m.json");
  spec.mutable_model()->set_tokenizer_path("/t.model");
  spec.mutable_optimizer()->set_name("Adam");
  spec.mutable_optimizer()->set_lr(0.5);
  spec.mutable_lr_scheduler()->set_decay_ratio(0.25);
  spec.mutable_training()->set_dataset(" /a.jsonl, /b.txt ,");
  spec.mutable_training()->set_steps(7);
  spec.mutable_training()->set_varlen(true);
  spec.mutable_checkpoint()->set_load_step(3);
  spec.mutable_metrics()->set_log_freq(2);
  const TrainConfig config = TrainConfigFromSpec(spec);
  EXPECT_EQ(config.dump_folder, "/d");
  EXPECT_EQ(config.model_config, "/m.json");
  EXPECT_EQ(config.tokenizer_path, "/t.model");
  EXPECT_EQ(config.optimizer.name, "Adam");
  EXPECT_DOUBLE_EQ(config.optimizer.lr, 0.5);
  EXPECT_EQ(config.lr_scheduler.decay_ratio, 0.25);
  EXPECT_EQ(config.training.dataset, (std::vector<std::string>{"/a.jsonl", "/b.txt"}));
  EXPECT_EQ(config.training.steps, 7);
  EXPECT_TRUE(config.training.varlen);
  EXPECT_EQ(config.checkpoint.load_step, 3);
  EXPECT_EQ(config.metrics.log_freq, 2);
  EXPECT_EQ(config.CheckpointRoot(), "/d/checkpoint");
}

TEST(TrainConfig, CopiesTheDataCheckpointMetricsProfilingAndCommOptions) {
  flame::v1::JobSpec spec;
  spec.mutable_training()->set_dataset("/a.jsonl,/b.jsonl");
  spec.mutable_training()->set_data_probs("0.75, 0.25");
  auto* c = spec.mutable_checkpoint();
  c->set_initial_load_path("/seed/step-0");
  c->set_initial_load_model_weights_only(false);
  c->set_last_save_model_weights_only(true);
  c->set_export_dtype("bfloat16");
  c->set_create_seed_checkpoint(true);
  c->set_exclude_from_loading("optimizer, dataloader");
  auto* m = spec.mutable_metrics();
  m->set_log_freq(3);
  m->set_enable_tensorboard(true);
  m->set_save_tb_folder("board");
  m->set_save_for_all_ranks(true);
  m->set_enable_wandb(true);
  m->set_eval_interval(50);
  m->set_eval_dataset("/e1.jsonl,/e2.txt");
  m->set_eval_steps(4);
  auto* p = spec.mutable_profiling();
  p->set_enable_profiling(true);
  p->set_save_traces_folder("traces");
  p->set_profile_freq(512);
  spec.mutable_comm()->set_init_timeout_seconds(600);
  spec.mutable_comm()->set_train_timeout_seconds(30);

  const TrainConfig config = TrainConfigFromSpec(spec);
  EXPECT_EQ(config.training.data_probs, (std::vector<double>{0.75, 0.25}));
  EXPECT_EQ(config.checkpoint.initial_load_path, "/seed/step-0");
  EXPECT_FALSE(config.checkpoint.initial_load_model_weights_only);
  EXPECT_TRUE(config.checkpoint.last_save_model_weights_only);
  EXPECT_EQ(config.checkpoint.export_dtype, "bfloat16");
  EXPECT_TRUE(config.checkpoint.create_seed_checkpoint);
  EXPECT_EQ(config.checkpoint.exclude_from_loading,
            (std::vector<std::string>{"optimizer", "dataloader"}));
  EXPECT_EQ(config.metrics.log_freq, 3);
  EXPECT_TRUE(config.metrics.enable_tensorboard);
  EXPECT_EQ(config.metrics.save_tb_folder, "board");
  EXPECT_TRUE(config.metrics.save_for_all_ranks);
  EXPECT_TRUE(config.metrics.enable_wandb);
  EXPECT_EQ(config.metrics.eval_interval, 50);
  EXPECT_EQ(config.metrics.eval_dataset, (std::vector<std::string>{"/e1.jsonl", "/e2.txt"}));
  EXPECT_EQ(config.metrics.eval_steps, 4);
  EXPECT_TRUE(config.profiling.enable_profiling);
  EXPECT_EQ(config.profiling.save_traces_folder, "traces");
  EXPECT_EQ(config.profiling.profile_freq, 512);
  EXPECT_EQ(config.comm.init_timeout_seconds, 600);
  EXPECT_EQ(config.comm.train_timeout_seconds, 30);
}

TEST(TrainConfig, ValidationNamesTheBadKey) {
  TrainConfig config;
  config.dump_folder = "/d";
  config.model_config = "/m.json";
  config.tokenizer_path = "/t.model";
  config.training.dataset = {"/a.jsonl"};
  ASSERT_TRUE(ValidateTrainConfig(config).ok());
  const auto expect_key = [&](TrainConfig bad, const std::string& key) {
    const absl::Status status = ValidateTrainConfig(bad);
    EXPECT_FALSE(status.ok()) << key;
    EXPECT_EQ(status.message().substr(0, key.size()), key) << status.message();
  };
  TrainConfig bad = config;
  bad.training.steps = -5;
  expect_key(bad, "training.steps");
  bad = config;
  bad.training.seq_len = 1;
  expect_key(bad, "training.seq_len");
  bad = config;
  bad.training.varlen = true;
  expect_key(bad, "training.batch_size");
  bad = config;
  bad.optimizer.name = "SGD";
  expect_key(bad, "optimizer.name");
  bad = config;
  bad.lr_scheduler.decay_type = "step";
  expect_key(bad, "lr_scheduler.decay_type");
  bad = config;
  bad.training.dataset.clear();
  expect_key(bad, "training.dataset");
  bad = config;
  bad.checkpoint.interval = 0;
  expect_key(bad, "checkpoint.interval");
  bad.checkpoint.enable_checkpoint = false;  // the interval does not matter then
  EXPECT_TRUE(ValidateTrainConfig(bad).ok());
}

TEST(TrainConfig, MetricsAndProfilingChecksNameTheKey) {
  TrainConfig config;
  config.dump_folder = "/d";
  config.model_config = "/m.json";
  config.tokenizer_path = "/t.model";
  config.training.dataset = {"/a.jsonl"};
  const auto message = [](const TrainConfig& c) {
    return std::string(ValidateTrainConfig(c).message());
  };
  TrainConfig bad = config;
  bad.metrics.log_freq = 0;
  EXPECT_EQ(message(bad).rfind("metrics.log_freq", 0), 0u) << message(bad);
  bad = config;
  bad.metrics.eval_interval = 50;  // without held-out files
  EXPECT_EQ(message(bad).rfind("metrics.eval_dataset is required", 0), 0u) << message(bad);
  bad.metrics.eval_dataset = {"/valid.jsonl"};
  EXPECT_TRUE(ValidateTrainConfig(bad).ok());
  bad.metrics.eval_steps = 0;
  EXPECT_EQ(message(bad).rfind("metrics.eval_steps", 0), 0u) << message(bad);
  bad = config;
  bad.metrics.eval_interval = -1;
  EXPECT_EQ(message(bad).rfind("metrics.eval_interval", 0), 0u) << message(bad);
  bad = config;
  bad.metrics.enable_tensorboard = true;
  bad.metrics.save_tb_folder = "";
  EXPECT_EQ(message(bad).rfind("metrics.save_tb_folder", 0), 0u) << message(bad);
  bad = config;
  bad.profiling.profile_freq = 0;  // off: not looked at
  EXPECT_TRUE(ValidateTrainConfig(bad).ok());
  bad.profiling.enable_profiling = true;
  EXPECT_EQ(message(bad).rfind("profiling.profile_freq", 0), 0u) << message(bad);
}

TEST(TrainConfig, CheckpointLoadOptionsAreCheckedByName) {
  TrainConfig config;
  config.dump_folder = "/d";
  config.model_config = "m.json";
  config.tokenizer_path = "t.model";
  config.training.dataset = {"a.jsonl"};
  config.checkpoint.export_dtype = "int8";
  absl::Status status = ValidateTrainConfig(config);
  EXPECT_NE(status.message().find("checkpoint.export_dtype"), std::string::npos) << status;
  config.checkpoint.export_dtype = "bfloat16";
  config.checkpoint.exclude_from_loading = {"dataloader", "scheduler"};
  status = ValidateTrainConfig(config);
  EXPECT_NE(status.message().find("checkpoint.exclude_from_loading"), std::string::npos);
  EXPECT_NE(status.message().find("\"scheduler\""), std::string::npos) << status;

  const absl::StatusOr<CheckpointComponents> parts =
      ComponentsToLoad({"optimizer", "dataloader", "lr_scheduler"});
  ASSERT_TRUE(parts.ok());
  EXPECT_TRUE(parts->model);
  EXPECT_TRUE(parts->train_state);
  EXPECT_FALSE(parts->optimizer);
  EXPECT_FALSE(parts->dataloader);
  EXPECT_FALSE(parts->lr_scheduler);
  EXPECT_TRUE(ComponentsToLoad({}).ok());
}

}  // namespace
}  // namespace flame::worker
