#include "worker/config/spec_conversion.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace flame::worker {
namespace {

// The trimmed, non-empty entries of a comma-separated list.
std::vector<std::string> SplitList(absl::string_view csv) {
  std::vector<std::string> entries;
  for (absl::string_view part : absl::StrSplit(csv, ',', absl::SkipWhitespace())) {
    entries.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return entries;
}

// `dst = src.field()` when the optional proto field is present.
#define FLAME_COPY_IF_SET(dst, src, field) \
  if ((src).has_##field()) (dst) = (src).field()

void CopyOptimizer(const flame::v1::OptimizerSection& s, OptimizerConfig* o) {
  FLAME_COPY_IF_SET(o->name, s, name);
  FLAME_COPY_IF_SET(o->lr, s, lr);
  FLAME_COPY_IF_SET(o->eps, s, eps);
  FLAME_COPY_IF_SET(o->beta1, s, beta1);
  FLAME_COPY_IF_SET(o->beta2, s, beta2);
  FLAME_COPY_IF_SET(o->weight_decay, s, weight_decay);
}

void CopySchedule(const flame::v1::LrSchedulerSection& s, LrScheduleConfig* o) {
  FLAME_COPY_IF_SET(o->warmup_steps, s, warmup_steps);
  if (s.has_decay_ratio()) o->decay_ratio = s.decay_ratio();
  FLAME_COPY_IF_SET(o->decay_type, s, decay_type);
  FLAME_COPY_IF_SET(o->lr_min, s, lr_min);
}

void CopyTraining(const flame::v1::TrainingSection& s, TrainingConfig* o) {
  FLAME_COPY_IF_SET(o->batch_size, s, batch_size);
  FLAME_COPY_IF_SET(o->seq_len, s, seq_len);
  FLAME_COPY_IF_SET(o->context_len, s, context_len);
  FLAME_COPY_IF_SET(o->varlen, s, varlen);
  FLAME_COPY_IF_SET(o->gradient_accumulation_steps, s, gradient_accumulation_steps);
  FLAME_COPY_IF_SET(o->steps, s, steps);
  FLAME_COPY_IF_SET(o->max_norm, s, max_norm);
  FLAME_COPY_IF_SET(o->skip_nan_inf, s, skip_nan_inf);
  FLAME_COPY_IF_SET(o->seed, s, seed);
  FLAME_COPY_IF_SET(o->deterministic, s, deterministic);
  FLAME_COPY_IF_SET(o->num_workers, s, num_workers);
  o->dataset = SplitList(s.dataset());
  o->data_probs.clear();
  for (const std::string& part : SplitList(s.data_probs())) {
    double probability = 0;
    // flamed validated the list; an entry that is not a number cannot reach a worker.
    if (absl::SimpleAtod(part, &probability)) o->data_probs.push_back(probability);
  }
}

void CopyCheckpoint(const flame::v1::CheckpointSection& s, CheckpointConfig* o) {
  FLAME_COPY_IF_SET(o->enable_checkpoint, s, enable_checkpoint);
  FLAME_COPY_IF_SET(o->folder, s, folder);
  FLAME_COPY_IF_SET(o->interval, s, interval);
  FLAME_COPY_IF_SET(o->keep_latest_k, s, keep_latest_k);
  FLAME_COPY_IF_SET(o->load_step, s, load_step);
  FLAME_COPY_IF_SET(o->initial_load_path, s, initial_load_path);
  FLAME_COPY_IF_SET(o->initial_load_model_weights_only, s, initial_load_model_weights_only);
  FLAME_COPY_IF_SET(o->last_save_model_weights_only, s, last_save_model_weights_only);
  FLAME_COPY_IF_SET(o->export_dtype, s, export_dtype);
  FLAME_COPY_IF_SET(o->create_seed_checkpoint, s, create_seed_checkpoint);
  o->exclude_from_loading = SplitList(s.exclude_from_loading());
}

void CopyMetrics(const flame::v1::MetricsSection& s, MetricsConfig* o) {
  FLAME_COPY_IF_SET(o->log_freq, s, log_freq);
  FLAME_COPY_IF_SET(o->enable_tensorboard, s, enable_tensorboard);
  FLAME_COPY_IF_SET(o->save_tb_folder, s, save_tb_folder);
  FLAME_COPY_IF_SET(o->save_for_all_ranks, s, save_for_all_ranks);
  FLAME_COPY_IF_SET(o->enable_wandb, s, enable_wandb);
  FLAME_COPY_IF_SET(o->eval_interval, s, eval_interval);
  o->eval_dataset = SplitList(s.eval_dataset());
  FLAME_COPY_IF_SET(o->eval_steps, s, eval_steps);
}

void CopyProfiling(const flame::v1::ProfilingSection& s, ProfilingConfig* o) {
  FLAME_COPY_IF_SET(o->enable_profiling, s, enable_profiling);
  FLAME_COPY_IF_SET(o->save_traces_folder, s, save_traces_folder);
  FLAME_COPY_IF_SET(o->profile_freq, s, profile_freq);
}

void CopyComm(const flame::v1::CommSection& s, CommConfig* o) {
  FLAME_COPY_IF_SET(o->init_timeout_seconds, s, init_timeout_seconds);
  FLAME_COPY_IF_SET(o->train_timeout_seconds, s, train_timeout_seconds);
}

}  // namespace

TrainConfig TrainConfigFromSpec(const flame::v1::JobSpec& spec) {
  TrainConfig config;
  FLAME_COPY_IF_SET(config.dump_folder, spec.job(), dump_folder);
  FLAME_COPY_IF_SET(config.description, spec.job(), description);
  FLAME_COPY_IF_SET(config.print_args, spec.job(), print_args);
  FLAME_COPY_IF_SET(config.model_name, spec.model(), name);
  FLAME_COPY_IF_SET(config.model_config, spec.model(), config);
  FLAME_COPY_IF_SET(config.tokenizer_path, spec.model(), tokenizer_path);
  CopyOptimizer(spec.optimizer(), &config.optimizer);
  CopySchedule(spec.lr_scheduler(), &config.lr_scheduler);
  CopyTraining(spec.training(), &config.training);
  CopyCheckpoint(spec.checkpoint(), &config.checkpoint);
  CopyMetrics(spec.metrics(), &config.metrics);
  CopyProfiling(spec.profiling(), &config.profiling);
  CopyComm(spec.comm(), &config.comm);
  FLAME_COPY_IF_SET(config.device, spec.resources(), device);
  return config;
}

#undef FLAME_COPY_IF_SET

}  // namespace flame::worker
