#include "common/job_spec.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/job_spec_checks.h"
#include "common/job_spec_options.h"
#include "common/status_macros.h"
#include "common/tokenizer_path.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace flame {
namespace {

using flame::v1::JobSpec;
using spec_checks::Invalid;
using spec_checks::RequireFile;
using spec_checks::RequireFinitePositive;
using spec_checks::RequireInRange;
using spec_checks::RequireNonNegative;
using spec_checks::RequireOneOf;
using spec_checks::RequirePositive;
using spec_checks::SplitList;

// Sets `field` of `msg` to `value` unless the user set it.
#define FLAME_DEFAULT(msg, field, value) \
  if (!(msg)->has_##field()) (msg)->set_##field(value)

void ApplyTrainingDefaults(flame::v1::TrainingSection* train) {
  FLAME_DEFAULT(train, batch_size, 8);
  FLAME_DEFAULT(train, seq_len, 2048);
  FLAME_DEFAULT(train, context_len, 2048);
  FLAME_DEFAULT(train, varlen, false);
  FLAME_DEFAULT(train, gradient_accumulation_steps, 1);
  FLAME_DEFAULT(train, steps, 10000);
  FLAME_DEFAULT(train, max_norm, 1.0);
  FLAME_DEFAULT(train, skip_nan_inf, false);
  FLAME_DEFAULT(train, seed, 42);
  FLAME_DEFAULT(train, deterministic, false);
  FLAME_DEFAULT(train, num_workers, 1);
  FLAME_DEFAULT(train, streaming, false);
  FLAME_DEFAULT(train, prefetch_factor, 2);
  FLAME_DEFAULT(train, data_parallel_replicate_degree, 1);
  FLAME_DEFAULT(train, data_parallel_shard_degree, -1);
  FLAME_DEFAULT(train, enable_cpu_offload, false);
  FLAME_DEFAULT(train, tensor_parallel_degree, 1);
  FLAME_DEFAULT(train, disable_loss_parallel, false);
  FLAME_DEFAULT(train, fsdp_reshard_after_forward, "default");
  FLAME_DEFAULT(train, mixed_precision_param, "bfloat16");
  FLAME_DEFAULT(train, mixed_precision_reduce, "float32");
  FLAME_DEFAULT(train, compile, false);
  FLAME_DEFAULT(train, gc_freq, 50);
  // TOML-only keys in flame, without an argparse default; fla.toml sets both to false.
  FLAME_DEFAULT(train, pin_memory, false);
  FLAME_DEFAULT(train, persistent_workers, false);
}

// The sections of flame options that this service accepts at flame's defaults only, or that
// only pick an implementation: experimental, activation checkpointing and offload, float8,
// comm, memory estimation, fault tolerance.
void ApplyExperimentalDefaults(JobSpec* spec) {
  auto* exp = spec->mutable_experimental();
  FLAME_DEFAULT(exp, enable_async_tensor_parallel, false);
  FLAME_DEFAULT(exp, pipeline_parallel_degree, 1);
  FLAME_DEFAULT(exp, pipeline_parallel_split_points, "");
  FLAME_DEFAULT(exp, pipeline_parallel_schedule, "1F1B");
  FLAME_DEFAULT(exp, pipeline_parallel_schedule_csv, "");
  FLAME_DEFAULT(exp, enable_compiled_autograd, false);
  FLAME_DEFAULT(exp, context_parallel_degree, 1);
  FLAME_DEFAULT(exp, context_parallel_rotate_method, "allgather");
  FLAME_DEFAULT(exp, custom_model_path, "");

  auto* ac = spec->mutable_activation_checkpoint();
  FLAME_DEFAULT(ac, mode, "selective");
  FLAME_DEFAULT(ac, selective_ac_option, "2");
  auto* offload = spec->mutable_activation_offload();
  FLAME_DEFAULT(offload, mode, "none");

  auto* fp8 = spec->mutable_float8();
  FLAME_DEFAULT(fp8, enable_fsdp_float8_all_gather, false);
  FLAME_DEFAULT(fp8, precompute_float8_dynamic_scale_for_fsdp, false);
  FLAME_DEFAULT(fp8, force_recompute_fp8_weight_in_bwd, false);

  auto* comm = spec->mutable_comm();
  FLAME_DEFAULT(comm, init_timeout_seconds, 300);
  FLAME_DEFAULT(comm, train_timeout_seconds, 100);
  FLAME_DEFAULT(comm, trace_buf_size, 20000);

  auto* estimation = spec->mutable_memory_estimation();
  FLAME_DEFAULT(estimation, enabled, false);
  FLAME_DEFAULT(estimation, disable_fake_mode, false);

  auto* ft = spec->mutable_fault_tolerance();
  FLAME_DEFAULT(ft, enable, false);
  FLAME_DEFAULT(ft, replica_id, 0);
  FLAME_DEFAULT(ft, group_size, 0);
  FLAME_DEFAULT(ft, min_replica_size, 1);
}

// A SentencePiece .model, a tokenizer.json, or a folder with one (common/tokenizer_path.h).
absl::Status ValidateTokenizerPath(const std::string& path) {
  if (path.empty()) return Invalid("model.tokenizer_path", "is required");
  if (!PathExists(path)) {
    return Invalid("model.tokenizer_path",
                   absl::StrCat("names a missing file: ", path,
                                " (a local .model file, tokenizer.json or folder; Hugging Face "
                                "hub ids are not supported: download the repository and give "
                                "its path)"));
  }
  absl::StatusOr<TokenizerFile> file = ResolveTokenizerPath(path);
  if (!file.ok()) return Invalid("model.tokenizer_path", std::string(file.status().message()));
  return absl::OkStatus();
}

absl::Status ValidateOptimizer(const flame::v1::OptimizerSection& o) {
  FLAME_RETURN_IF_ERROR(RequireOneOf("optimizer.name", o.name(), {"AdamW", "Adam"}));
  FLAME_RETURN_IF_ERROR(RequireFinitePositive("optimizer.lr", o.lr()));
  FLAME_RETURN_IF_ERROR(RequireFinitePositive("optimizer.eps", o.eps()));
  FLAME_RETURN_IF_ERROR(RequireInRange("optimizer.beta1", o.beta1(), 0.0, 0.999999));
  FLAME_RETURN_IF_ERROR(RequireInRange("optimizer.beta2", o.beta2(), 0.0, 0.999999));
  return RequireInRange("optimizer.weight_decay", o.weight_decay(), 0.0, 1e3);
}

absl::Status ValidateSchedule(const flame::v1::LrSchedulerSection& s) {
  FLAME_RETURN_IF_ERROR(RequireNonNegative("lr_scheduler.warmup_steps", s.warmup_steps()));
  if (s.has_decay_ratio()) {
    FLAME_RETURN_IF_ERROR(RequireInRange("lr_scheduler.decay_ratio", s.decay_ratio(), 0.0, 1.0));
  }
  FLAME_RETURN_IF_ERROR(
      RequireOneOf("lr_scheduler.decay_type", s.decay_type(), {"linear", "sqrt", "cosine"}));
  return RequireInRange("lr_scheduler.lr_min", s.lr_min(), 0.0, 1.0);
}

// flame's defaults and fla.toml name hub repositories here ("fla-hub/..."); we read local files.
absl::Status RequireModelFile(absl::string_view key, const std::string& path) {
  if (path.empty() || PathExists(path)) return RequireFile(key, path);
  return Invalid(key, absl::StrCat("names a missing file: ", path,
                                   " (a local file; Hugging Face hub ids are not supported: "
                                   "download the repository and give the file's path)"));
}

// Local files only: a missing entry is most often a Hugging Face hub id copied from a flame
// command, so the error says what to do about that.
absl::Status RequireDatasetFiles(absl::string_view key, const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (PathExists(path)) continue;
    return Invalid(key, absl::StrCat("names a missing file: ", path,
                                     " (datasets are local JSONL or text files or folders; "
                                     "Hugging Face hub ids are not supported: download the "
                                     "dataset and name its files)"));
  }
  return absl::OkStatus();
}

// training.data_probs: one positive weight per dataset (flame's interleave probabilities; the
// worker normalises them), required when there are several datasets, as in flame. The worker
// checks the same (worker/config/train_config.cc); refusing here keeps a bad job out of the queue.
absl::Status ValidateDataProbs(const flame::v1::TrainingSection& t, size_t datasets) {
  if (!t.has_data_probs() || SplitList(t.data_probs()).empty()) {
    if (datasets <= 1) return absl::OkStatus();
    return Invalid("training.data_probs",
                   absl::StrCat("is required when training.dataset names more than one dataset (",
                                datasets, " named): one sampling weight per dataset"));
  }
  const std::vector<std::string> entries = SplitList(t.data_probs(), /*keep_empty=*/true);
  if (entries.size() != datasets) {
    return Invalid("training.data_probs",
                   absl::StrCat("has ", entries.size(), " entries but training.dataset names ",
                                datasets, " (one probability per dataset)"));
  }
  for (const std::string& entry : entries) {
    double p = 0;
    if (!absl::SimpleAtod(entry, &p) || !std::isfinite(p) || !(p > 0)) {
      return Invalid("training.data_probs",
                     absl::StrCat("must be positive numbers (got \"", entry, "\")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDatasets(const flame::v1::TrainingSection& t) {
  const std::vector<std::string> datasets = SplitList(t.dataset());
  if (datasets.empty()) return Invalid("training.dataset", "is required");
  FLAME_RETURN_IF_ERROR(RequireDatasetFiles("training.dataset", datasets));
  return ValidateDataProbs(t, datasets.size());
}

absl::Status ValidateTraining(const flame::v1::TrainingSection& t) {
  FLAME_RETURN_IF_ERROR(RequirePositive("training.steps", t.steps()));
  FLAME_RETURN_IF_ERROR(RequirePositive("training.batch_size", t.batch_size()));
  FLAME_RETURN_IF_ERROR(RequirePositive("training.seq_len", t.seq_len()));
  FLAME_RETURN_IF_ERROR(RequirePositive("training.context_len", t.context_len()));
  FLAME_RETURN_IF_ERROR(
      RequirePositive("training.gradient_accumulation_steps", t.gradient_accumulation_steps()));
  FLAME_RETURN_IF_ERROR(RequireNonNegative("training.num_workers", t.num_workers()));
  if (!(t.max_norm() >= 0) || !std::isfinite(t.max_norm())) {
    return Invalid("training.max_norm", absl::StrCat("must be >= 0 (got ", t.max_norm(), ")"));
  }
  if (t.varlen() && t.batch_size() != 1) {
    return Invalid("training.batch_size", "must be 1 when training.varlen is set");
  }
  return ValidateDatasets(t);
}

absl::Status ValidateCheckpoint(const flame::v1::CheckpointSection& c) {
  FLAME_RETURN_IF_ERROR(RequirePositive("checkpoint.interval", c.interval()));
  FLAME_RETURN_IF_ERROR(RequireNonNegative("checkpoint.keep_latest_k", c.keep_latest_k()));
  if (c.load_step() < -1) {
    return Invalid("checkpoint.load_step", absl::StrCat("must be -1 or a step (got ",
                                                        c.load_step(), ")"));
  }
  if (c.folder().empty()) return Invalid("checkpoint.folder", "must not be empty");
  if (c.has_initial_load_path() && !c.initial_load_path().empty()) {
    FLAME_RETURN_IF_ERROR(RequireFile("checkpoint.initial_load_path", c.initial_load_path()));
  }
  FLAME_RETURN_IF_ERROR(RequireOneOf("checkpoint.export_dtype", c.export_dtype(),
                                     {"float16", "bfloat16", "float32"}));
  FLAME_RETURN_IF_ERROR(RequireOneOf("checkpoint.async_mode", c.async_mode(),
                                     {"disabled", "async", "async_with_pinned_mem"}));
  for (const std::string& part : SplitList(c.exclude_from_loading())) {
    FLAME_RETURN_IF_ERROR(
        RequireOneOf("checkpoint.exclude_from_loading", part,
                     {"model", "optimizer", "lr_scheduler", "dataloader", "train_state"}));
  }
  return absl::OkStatus();
}

absl::Status ValidateMetrics(const flame::v1::MetricsSection& m) {
  FLAME_RETURN_IF_ERROR(RequirePositive("metrics.log_freq", m.log_freq()));
  if (m.save_tb_folder().empty()) return Invalid("metrics.save_tb_folder", "must not be empty");
  FLAME_RETURN_IF_ERROR(RequireNonNegative("metrics.eval_interval", m.eval_interval()));
  FLAME_RETURN_IF_ERROR(RequirePositive("metrics.eval_steps", m.eval_steps()));
  const std::vector<std::string> eval = SplitList(m.eval_dataset());
  if (m.eval_interval() > 0 && eval.empty()) {
    return Invalid("metrics.eval_dataset", "is required when metrics.eval_interval is set");
  }
  return RequireDatasetFiles("metrics.eval_dataset", eval);
}

absl::Status ValidateProfiling(const flame::v1::ProfilingSection& p) {
  FLAME_RETURN_IF_ERROR(RequirePositive("profiling.profile_freq", p.profile_freq()));
  if (p.save_traces_folder().empty()) {
    return Invalid("profiling.save_traces_folder", "must not be empty");
  }
  return absl::OkStatus();
}

absl::Status ValidateResources(const flame::v1::ResourcesSection& r) {
  FLAME_RETURN_IF_ERROR(RequirePositive("resources.ranks", r.ranks()));
  FLAME_RETURN_IF_ERROR(RequireOneOf("resources.device", r.device(), {"auto", "cpu", "cuda"}));
  return RequireNonNegative("resources.max_restarts", r.max_restarts());
}

}  // namespace

void ApplyJobSpecDefaults(JobSpec* spec) {
  // flame's argparse defaults (config_manager), except where a managed service needs another
  // (README, "Configuration keys", marks each): checkpoints are on, the dump folder is chosen by
  // flamed per job, and one tokenizer thread per rank. Options flame leaves at None stay unset.
  auto* job = spec->mutable_job();
  FLAME_DEFAULT(job, description, "default job");
  FLAME_DEFAULT(job, print_args, false);
  FLAME_DEFAULT(job, use_for_integration_test, false);

  auto* model = spec->mutable_model();
  FLAME_DEFAULT(model, name, "fla");
  FLAME_DEFAULT(model, converters, "");
  FLAME_DEFAULT(model, print_after_conversion, false);

  auto* profiling = spec->mutable_profiling();
  FLAME_DEFAULT(profiling, enable_profiling, false);
  FLAME_DEFAULT(profiling, save_traces_folder, "profile_traces");
  FLAME_DEFAULT(profiling, profile_freq, 10);
  FLAME_DEFAULT(profiling, enable_memory_snapshot, false);
  FLAME_DEFAULT(profiling, save_memory_snapshot_folder, "memory_snapshot");

  auto* opt = spec->mutable_optimizer();
  FLAME_DEFAULT(opt, name, "AdamW");
  FLAME_DEFAULT(opt, lr, 8e-4);
  FLAME_DEFAULT(opt, eps, 1e-8);
  FLAME_DEFAULT(opt, beta1, 0.9);
  FLAME_DEFAULT(opt, beta2, 0.95);
  FLAME_DEFAULT(opt, weight_decay, 0.1);
  FLAME_DEFAULT(opt, implementation, "fused");
  FLAME_DEFAULT(opt, early_step_in_backward, false);

  auto* sched = spec->mutable_lr_scheduler();
  FLAME_DEFAULT(sched, warmup_steps, 200);
  FLAME_DEFAULT(sched, decay_type, "linear");
  FLAME_DEFAULT(sched, lr_min, 0.0);

  ApplyTrainingDefaults(spec->mutable_training());

  auto* ckpt = spec->mutable_checkpoint();
  FLAME_DEFAULT(ckpt, enable_checkpoint, true);
  FLAME_DEFAULT(ckpt, folder, "checkpoint");
  FLAME_DEFAULT(ckpt, interval, 500);
  FLAME_DEFAULT(ckpt, keep_latest_k, 0);
  FLAME_DEFAULT(ckpt, load_step, -1);
  FLAME_DEFAULT(ckpt, initial_load_model_weights_only, true);
  FLAME_DEFAULT(ckpt, last_save_model_weights_only, false);
  FLAME_DEFAULT(ckpt, export_dtype, "float32");
  FLAME_DEFAULT(ckpt, create_seed_checkpoint, false);
  FLAME_DEFAULT(ckpt, async_mode, "disabled");
  FLAME_DEFAULT(ckpt, exclude_from_loading, "");

  auto* metrics = spec->mutable_metrics();
  FLAME_DEFAULT(metrics, log_freq, 10);
  FLAME_DEFAULT(metrics, enable_tensorboard, false);
  FLAME_DEFAULT(metrics, disable_color_printing, false);
  FLAME_DEFAULT(metrics, save_tb_folder, "tb");
  FLAME_DEFAULT(metrics, save_for_all_ranks, false);
  FLAME_DEFAULT(metrics, enable_wandb, false);
  FLAME_DEFAULT(metrics, eval_interval, 0);
  FLAME_DEFAULT(metrics, eval_steps, 8);

  ApplyExperimentalDefaults(spec);

  auto* res = spec->mutable_resources();
  FLAME_DEFAULT(res, ranks, 1);
  FLAME_DEFAULT(res, device, "auto");
  FLAME_DEFAULT(res, max_restarts, 0);
}

#undef FLAME_DEFAULT

absl::Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.model().name() != "fla") {
    return Invalid("model.name",
                   absl::StrCat("must be \"fla\" (got \"", spec.model().name(), "\")"));
  }
  FLAME_RETURN_IF_ERROR(RequireModelFile("model.config", spec.model().config()));
  FLAME_RETURN_IF_ERROR(ValidateTokenizerPath(spec.model().tokenizer_path()));
  FLAME_RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  FLAME_RETURN_IF_ERROR(ValidateSchedule(spec.lr_scheduler()));
  FLAME_RETURN_IF_ERROR(ValidateTraining(spec.training()));
  FLAME_RETURN_IF_ERROR(ValidateCheckpoint(spec.checkpoint()));
  FLAME_RETURN_IF_ERROR(ValidateMetrics(spec.metrics()));
  FLAME_RETURN_IF_ERROR(ValidateProfiling(spec.profiling()));
  FLAME_RETURN_IF_ERROR(ValidateResources(spec.resources()));
  // flame's parallelism, precision and data-source options: kept at the values this service
  // trains with, or refused (common/job_spec_options.cc).
  return ValidateFlameOptions(spec);
}

std::string JobSpecHash(const JobSpec& spec) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    spec.SerializeToCodedStream(&coded);
  }
  // FNV-1a, 64 bit, twice with different offsets: a change detector, not a security hash.
  uint64_t a = 0xcbf29ce484222325ULL, b = 0x84222325cbf29ce4ULL;
  for (unsigned char c : bytes) {
    a = (a ^ c) * 0x100000001b3ULL;
    b = (b ^ c) * 0x100000001b3ULL;
  }
  return absl::StrFormat("%016x%016x", a, b);
}

}  // namespace flame
