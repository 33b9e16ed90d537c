// TrainConfig: everything one rank needs to know about its job, as plain C++.
//
// The coordinator sends a resolved flame.v1.JobSpec; worker/config/spec_conversion.h turns it into
// this struct in a target without Torch, so that the training code (which links LibTorch and must
// never see generated protobuf headers, see DESIGN.md) depends only on this header. Field names
// follow the JobSpec sections, which follow flame's JobConfig. Defaults equal those of
// common/job_spec.cc (a test keeps the two in step), so tests can build a config by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flame::worker {

struct OptimizerConfig {
  std::string name = "AdamW";  // AdamW | Adam
  double lr = 8e-4;
  double eps = 1e-8;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double weight_decay = 0.1;
};

struct LrScheduleConfig {
  int64_t warmup_steps = 200;
  std::optional<double> decay_ratio;  // unset: decay starts right after warm-up
  std::string decay_type = "linear";  // linear | sqrt | cosine
  double lr_min = 0.0;                // a ratio of OptimizerConfig::lr
};

struct TrainingConfig {
  int64_t batch_size = 8;  // per rank, per micro-batch
  int64_t seq_len = 2048;
  int64_t context_len = 2048;
  bool varlen = false;
  int64_t gradient_accumulation_steps = 1;
  int64_t steps = 10000;
  double max_norm = 1.0;  // 0: report the norm, do not clip
  bool skip_nan_inf = false;
  // Sources: JSONL/plain-text files or folders, or token shard folders (flame-tokenize).
  std::vector<std::string> dataset;
  // Sampling weight of each source (normalised); empty: one source. Required with several.
  std::vector<double> data_probs;
  int64_t seed = 42;
  bool deterministic = false;
  int64_t num_workers = 1;
};

struct CheckpointConfig {
  bool enable_checkpoint = true;
  std::string folder = "checkpoint";  // under dump_folder
  int64_t interval = 500;
  int64_t keep_latest_k = 0;  // 0 keeps every checkpoint
  int64_t load_step = -1;     // -1: the newest complete checkpoint; 0: model weights only
  // Where a job with no checkpoint yet starts from: a step-N folder or an HF-style folder
  // (model.safetensors + config.json). "" = none.
  std::string initial_load_path;
  bool initial_load_model_weights_only = true;
  // The final save keeps model weights only (model.safetensors), cast to export_dtype.
  bool last_save_model_weights_only = false;
  std::string export_dtype = "float32";  // float16 | bfloat16 | float32
  // Save step-0 (the initial weights) and exit; world size 1 only.
  bool create_seed_checkpoint = false;
  // Components not restored: model, optimizer, lr_scheduler, dataloader, train_state.
  std::vector<std::string> exclude_from_loading;
};

// Collective timeouts: init_timeout_seconds until step 1 ends, train_timeout_seconds after.
struct CommConfig {
  int64_t init_timeout_seconds = 300;
  int64_t train_timeout_seconds = 100;
};

// [metrics]: flame's names and defaults, plus a held-out evaluation.
struct MetricsConfig {
  int64_t log_freq = 10;  // report step 1 and every log_freq steps
  bool enable_tensorboard = false;
  std::string save_tb_folder = "tb";      // under dump_folder, then <YYYYmmdd-HHMM>/
  bool save_for_all_ranks = false;        // TensorBoard: every rank writes to rank_<r>/
  bool enable_wandb = false;              // W&B is not reachable from flame: a warning only
  int64_t eval_interval = 0;              // 0: no eval
  std::vector<std::string> eval_dataset;  // held-out files, same formats as training.dataset
  int64_t eval_steps = 8;                 // batches per evaluation
};

// [profiling]: a Chrome trace of one step every profile_freq steps.
struct ProfilingConfig {
  bool enable_profiling = false;
  std::string save_traces_folder = "profile_traces";  // under dump_folder
  int64_t profile_freq = 10;
};

// What a checkpoint load restores: all but checkpoint.exclude_from_loading.
struct CheckpointComponents {
  bool model = true;
  bool optimizer = true;
  bool lr_scheduler = true;
  bool dataloader = true;
  bool train_state = true;  // step, tokens, skipped steps, elapsed time, RNG
};

// Checks the names in `exclude` and turns them into the components to load.
absl::StatusOr<CheckpointComponents> ComponentsToLoad(const std::vector<std::string>& exclude);

struct TrainConfig {
  // [job]
  std::string dump_folder;  // absolute
  std::string description = "default job";
  bool print_args = false;
  // [model]
  std::string model_name = "fla";
  std::string model_config;  // path to an HF-style config.json
  std::string tokenizer_path;
  OptimizerConfig optimizer;
  LrScheduleConfig lr_scheduler;
  TrainingConfig training;
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
  ProfilingConfig profiling;
  CommConfig comm;
  // [resources]
  std::string device = "auto";  // auto | cpu | cuda
  // JobSpecHash of the resolved spec; checkpoints record it to notice a changed job on resume.
  std::string spec_hash;

  // Folder that holds step-N/ checkpoints: <dump_folder>/<checkpoint.folder>.
  std::string CheckpointRoot() const;
};

// The checks the training code relies on (flamed validates the full spec; a worker started by
// hand or by a newer coordinator must still fail with a clear message, never crash).
absl::Status ValidateTrainConfig(const TrainConfig& config);

// "key = value" lines for the start-up log (flame's print_args).
std::string DescribeTrainConfig(const TrainConfig& config);

}  // namespace flame::worker
