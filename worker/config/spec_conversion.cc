#include "worker/config/spec_conversion.h"

#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace flame::worker {
namespace {

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
  o->dataset.clear();
  for (absl::string_view part : absl::StrSplit(s.dataset(), ',', absl::SkipWhitespace())) {
    o->dataset.emplace_back(absl::StripAsciiWhitespace(part));
  }
}

void CopyCheckpoint(const flame::v1::CheckpointSection& s, CheckpointConfig* o) {
  FLAME_COPY_IF_SET(o->enable_checkpoint, s, enable_checkpoint);
  FLAME_COPY_IF_SET(o->folder, s, folder);
  FLAME_COPY_IF_SET(o->interval, s, interval);
  FLAME_COPY_IF_SET(o->keep_latest_k, s, keep_latest_k);
  FLAME_COPY_IF_SET(o->load_step, s, load_step);
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
  FLAME_COPY_IF_SET(config.metrics.log_freq, spec.metrics(), log_freq);
  FLAME_COPY_IF_SET(config.device, spec.resources(), device);
  return config;
}

#undef FLAME_COPY_IF_SET

}  // namespace flame::worker
