#include "worker/config/train_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace flame::worker {
namespace {

absl::Status Invalid(const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(key, " ", why));
}

absl::Status RequirePositive(const std::string& key, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be positive (got ", value, ")"));
}

absl::Status ValidateMetrics(const MetricsConfig& m) {
  FLAME_RETURN_IF_ERROR(RequirePositive("metrics.log_freq", m.log_freq));
  if (m.enable_tensorboard && m.save_tb_folder.empty()) {
    return Invalid("metrics.save_tb_folder", "must not be empty when enable_tensorboard is set");
  }
  if (m.eval_interval < 0) {
    return Invalid("metrics.eval_interval",
                   absl::StrCat("must be >= 0 (0: no eval; got ", m.eval_interval, ")"));
  }
  if (m.eval_interval > 0 && m.eval_dataset.empty()) {
    return Invalid("metrics.eval_dataset",
                   absl::StrCat("is required when metrics.eval_interval is set (got ",
                                m.eval_interval, "): name the held-out files"));
  }
  if (m.eval_interval == 0) return absl::OkStatus();
  return RequirePositive("metrics.eval_steps", m.eval_steps);
}

absl::Status ValidateProfiling(const ProfilingConfig& p) {
  if (!p.enable_profiling) return absl::OkStatus();
  FLAME_RETURN_IF_ERROR(RequirePositive("profiling.profile_freq", p.profile_freq));
  if (p.save_traces_folder.empty()) {
    return Invalid("profiling.save_traces_folder", "must not be empty when profiling is enabled");
  }
  return absl::OkStatus();
}

// flame's rule: one probability per source, required when there are several.
absl::Status ValidateDataProbs(const TrainingConfig& t) {
  if (t.data_probs.empty()) {
    if (t.dataset.size() <= 1) return absl::OkStatus();
    return Invalid("training.data_probs",
                   absl::StrCat("is required when training.dataset lists more than one source (",
                                t.dataset.size(), " listed)"));
  }
  if (t.data_probs.size() != t.dataset.size()) {
    return Invalid("training.data_probs",
                   absl::StrCat("has ", t.data_probs.size(), " values for ", t.dataset.size(),
                                " sources in training.dataset (one per source)"));
  }
  for (size_t i = 0; i < t.data_probs.size(); ++i) {
    if (!(t.data_probs[i] > 0) || !std::isfinite(t.data_probs[i])) {
      return Invalid("training.data_probs", absl::StrCat("values must be positive (entry ", i + 1,
                                                         " is ", t.data_probs[i], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointComponents> ComponentsToLoad(const std::vector<std::string>& exclude) {
  CheckpointComponents parts;
  for (const std::string& name : exclude) {
    bool* flag = name == "model"          ? &parts.model
                 : name == "optimizer"    ? &parts.optimizer
                 : name == "lr_scheduler" ? &parts.lr_scheduler
                 : name == "dataloader"   ? &parts.dataloader
                 : name == "train_state"  ? &parts.train_state
                                          : nullptr;
    if (flag == nullptr) {
      return Invalid("checkpoint.exclude_from_loading",
                     absl::StrCat("has unknown component \"", name,
                                  "\" (known: model, optimizer, lr_scheduler, dataloader, "
                                  "train_state)"));
    }
    *flag = false;
  }
  return parts;
}

std::string TrainConfig::CheckpointRoot() const {
  if (dump_folder.empty()) return checkpoint.folder;
  return absl::StrCat(dump_folder, "/", checkpoint.folder);
}

absl::Status ValidateTrainConfig(const TrainConfig& c) {
  if (c.model_name != "fla") return Invalid("model.name", "must be \"fla\"");
  if (c.model_config.empty()) return Invalid("model.config", "is required");
  if (c.tokenizer_path.empty()) return Invalid("model.tokenizer_path", "is required");
  if (c.optimizer.name != "AdamW" && c.optimizer.name != "Adam") {
    return Invalid("optimizer.name",
                   absl::StrCat("must be AdamW or Adam (got \"", c.optimizer.name, "\")"));
  }
  if (!(c.optimizer.lr > 0) || !std::isfinite(c.optimizer.lr)) {
    return Invalid("optimizer.lr", "must be a positive number");
  }
  const std::string& decay = c.lr_scheduler.decay_type;
  if (decay != "linear" && decay != "sqrt" && decay != "cosine") {
    return Invalid("lr_scheduler.decay_type",
                   absl::StrCat("must be linear, sqrt or cosine (got \"", decay, "\")"));
  }
  if (c.lr_scheduler.warmup_steps < 0) return Invalid("lr_scheduler.warmup_steps", "must be >= 0");
  if (c.lr_scheduler.decay_ratio &&
      !(*c.lr_scheduler.decay_ratio >= 0 && *c.lr_scheduler.decay_ratio <= 1)) {
    return Invalid("lr_scheduler.decay_ratio", "must be in [0, 1]");
  }
  if (!(c.lr_scheduler.lr_min >= 0 && c.lr_scheduler.lr_min <= 1)) {
    return Invalid("lr_scheduler.lr_min", "must be in [0, 1]");
  }
  const TrainingConfig& t = c.training;
  FLAME_RETURN_IF_ERROR(RequirePositive("training.steps", t.steps));
  FLAME_RETURN_IF_ERROR(RequirePositive("training.batch_size", t.batch_size));
  FLAME_RETURN_IF_ERROR(RequirePositive("training.context_len", t.context_len));
  FLAME_RETURN_IF_ERROR(
      RequirePositive("training.gradient_accumulation_steps", t.gradient_accumulation_steps));
  // The model predicts token t+1 from tokens <= t: a row of one token has nothing to learn.
  if (t.seq_len < 2) return Invalid("training.seq_len", "must be at least 2");
  if (t.varlen && t.batch_size != 1) {
    return Invalid("training.batch_size", "must be 1 when training.varlen is set");
  }
  if (!(t.max_norm >= 0) || !std::isfinite(t.max_norm)) {
    return Invalid("training.max_norm", "must be >= 0");
  }
  if (t.dataset.empty()) return Invalid("training.dataset", "is required");
  FLAME_RETURN_IF_ERROR(ValidateDataProbs(t));
  if (c.checkpoint.enable_checkpoint) {
    FLAME_RETURN_IF_ERROR(RequirePositive("checkpoint.interval", c.checkpoint.interval));
  }
  if (c.checkpoint.keep_latest_k < 0) return Invalid("checkpoint.keep_latest_k", "must be >= 0");
  if (c.checkpoint.load_step < -1) return Invalid("checkpoint.load_step", "must be -1 or a step");
  if (c.checkpoint.folder.empty()) return Invalid("checkpoint.folder", "must not be empty");
  const std::string& dtype = c.checkpoint.export_dtype;
  if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16") {
    return Invalid("checkpoint.export_dtype",
                   absl::StrCat("must be float16, bfloat16 or float32 (got \"", dtype, "\")"));
  }
  FLAME_RETURN_IF_ERROR(ComponentsToLoad(c.checkpoint.exclude_from_loading).status());
  if (c.dump_folder.empty()) return Invalid("job.dump_folder", "is required");
  FLAME_RETURN_IF_ERROR(ValidateMetrics(c.metrics));
  return ValidateProfiling(c.profiling);
}

std::string DescribeTrainConfig(const TrainConfig& c) {
  const TrainingConfig& t = c.training;
  const std::vector<std::string> lines = {
      absl::StrCat("job.dump_folder = ", c.dump_folder),
      absl::StrCat("job.description = ", c.description),
      absl::StrCat("model.config = ", c.model_config),
      absl::StrCat("model.tokenizer_path = ", c.tokenizer_path),
      absl::StrCat("optimizer = ", c.optimizer.name, " lr=", c.optimizer.lr,
                   " eps=", c.optimizer.eps, " betas=(", c.optimizer.beta1, ", ", c.optimizer.beta2,
                   ") weight_decay=", c.optimizer.weight_decay),
      absl::StrCat("lr_scheduler = warmup ", c.lr_scheduler.warmup_steps, ", decay ",
                   c.lr_scheduler.decay_type, ", decay_ratio ",
                   c.lr_scheduler.decay_ratio ? absl::StrCat(*c.lr_scheduler.decay_ratio)
                                              : std::string("unset"),
                   ", lr_min ", c.lr_scheduler.lr_min),
      absl::StrCat("training = batch ", t.batch_size, " x seq ", t.seq_len, ", ga ",
                   t.gradient_accumulation_steps, ", steps ", t.steps, ", max_norm ", t.max_norm,
                   ", skip_nan_inf ", t.skip_nan_inf, ", varlen ", t.varlen, ", context_len ",
                   t.context_len, ", seed ", t.seed),
      absl::StrCat("training.dataset = ", absl::StrJoin(t.dataset, ",")),
      absl::StrCat("training.data_probs = ", absl::StrJoin(t.data_probs, ",")),
      absl::StrCat("checkpoint = ", c.checkpoint.enable_checkpoint ? "on" : "off", ", folder ",
                   c.checkpoint.folder, ", interval ", c.checkpoint.interval, ", keep_latest_k ",
                   c.checkpoint.keep_latest_k, ", load_step ", c.checkpoint.load_step,
                   ", initial_load_path ",
                   c.checkpoint.initial_load_path.empty() ? std::string("unset")
                                                          : c.checkpoint.initial_load_path,
                   c.checkpoint.initial_load_model_weights_only ? " (weights only)" : "",
                   ", last_save_model_weights_only ", c.checkpoint.last_save_model_weights_only,
                   ", export_dtype ", c.checkpoint.export_dtype, ", exclude_from_loading [",
                   absl::StrJoin(c.checkpoint.exclude_from_loading, ","), "]"),
      absl::StrCat("metrics = log_freq ", c.metrics.log_freq, ", tensorboard ",
                   c.metrics.enable_tensorboard ? c.metrics.save_tb_folder : "off",
                   c.metrics.save_for_all_ranks ? " (all ranks)" : "", ", wandb ",
                   c.metrics.enable_wandb, ", eval_interval ", c.metrics.eval_interval,
                   ", eval_steps ", c.metrics.eval_steps),
      absl::StrCat("metrics.eval_dataset = ", absl::StrJoin(c.metrics.eval_dataset, ",")),
      absl::StrCat("profiling = ", c.profiling.enable_profiling
                                       ? absl::StrCat("every ", c.profiling.profile_freq,
                                                      " steps to ", c.profiling.save_traces_folder)
                                       : std::string("off")),
      absl::StrCat("resources.device = ", c.device),
  };
  return absl::StrJoin(lines, "\n");
}

}  // namespace flame::worker
