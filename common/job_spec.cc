#include "common/job_spec.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "common/tokenizer_path.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace flame {
namespace {

using flame::v1::JobSpec;

// Sets `field` of `msg` to `value` unless the user set it.
#define FLAME_DEFAULT(msg, field, value) \
  if (!(msg)->has_##field()) (msg)->set_##field(value)

absl::Status Invalid(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(key, " ", why));
}

absl::Status RequirePositive(absl::string_view key, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be positive (got ", value, ")"));
}

absl::Status RequireNonNegative(absl::string_view key, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must not be negative (got ", value, ")"));
}

absl::Status RequireFinitePositive(absl::string_view key, double value) {
  if (std::isfinite(value) && value > 0) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be a positive number (got ", value, ")"));
}

absl::Status RequireInRange(absl::string_view key, double value, double low, double high) {
  if (std::isfinite(value) && value >= low && value <= high) return absl::OkStatus();
  return Invalid(key, absl::StrFormat("must be in [%g, %g] (got %g)", low, high, value));
}

absl::Status RequireOneOf(absl::string_view key, const std::string& value,
                          const std::vector<std::string>& allowed) {
  for (const std::string& option : allowed) {
    if (value == option) return absl::OkStatus();
  }
  return Invalid(key, absl::StrCat("must be one of ", absl::StrJoin(allowed, ", "), " (got \"",
                                   value, "\")"));
}

absl::Status RequireFile(absl::string_view key, const std::string& path) {
  if (path.empty()) return Invalid(key, "is required");
  if (!PathExists(path)) return Invalid(key, absl::StrCat("names a missing file: ", path));
  return absl::OkStatus();
}

// A SentencePiece .model, a tokenizer.json, or a folder with one (common/tokenizer_path.h).
absl::Status ValidateTokenizerPath(const std::string& path) {
  if (path.empty()) return Invalid("model.tokenizer_path", "is required");
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
  if (t.dataset().empty()) return Invalid("training.dataset", "is required");
  for (absl::string_view part : absl::StrSplit(t.dataset(), ',', absl::SkipWhitespace())) {
    FLAME_RETURN_IF_ERROR(
        RequireFile("training.dataset", std::string(absl::StripAsciiWhitespace(part))));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpoint(const flame::v1::CheckpointSection& c) {
  FLAME_RETURN_IF_ERROR(RequirePositive("checkpoint.interval", c.interval()));
  FLAME_RETURN_IF_ERROR(RequireNonNegative("checkpoint.keep_latest_k", c.keep_latest_k()));
  if (c.load_step() < -1) {
    return Invalid("checkpoint.load_step", absl::StrCat("must be -1 or a step (got ",
                                                        c.load_step(), ")"));
  }
  if (c.folder().empty()) return Invalid("checkpoint.folder", "must not be empty");
  return absl::OkStatus();
}

absl::Status ValidateResources(const flame::v1::ResourcesSection& r) {
  FLAME_RETURN_IF_ERROR(RequirePositive("resources.ranks", r.ranks()));
  FLAME_RETURN_IF_ERROR(RequireOneOf("resources.device", r.device(), {"auto", "cpu", "cuda"}));
  return RequireNonNegative("resources.max_restarts", r.max_restarts());
}

}  // namespace

void ApplyJobSpecDefaults(JobSpec* spec) {
  // flame's argparse defaults (config_manager), except where a managed service needs another:
  // checkpoints are on by default, and the dump folder is chosen by flamed per job.
  auto* job = spec->mutable_job();
  FLAME_DEFAULT(job, description, "default job");
  FLAME_DEFAULT(job, print_args, false);

  auto* model = spec->mutable_model();
  FLAME_DEFAULT(model, name, "fla");

  auto* opt = spec->mutable_optimizer();
  FLAME_DEFAULT(opt, name, "AdamW");
  FLAME_DEFAULT(opt, lr, 8e-4);
  FLAME_DEFAULT(opt, eps, 1e-8);
  FLAME_DEFAULT(opt, beta1, 0.9);
  FLAME_DEFAULT(opt, beta2, 0.95);
  FLAME_DEFAULT(opt, weight_decay, 0.1);

  auto* sched = spec->mutable_lr_scheduler();
  FLAME_DEFAULT(sched, warmup_steps, 200);
  FLAME_DEFAULT(sched, decay_type, "linear");
  FLAME_DEFAULT(sched, lr_min, 0.0);

  auto* train = spec->mutable_training();
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

  auto* ckpt = spec->mutable_checkpoint();
  FLAME_DEFAULT(ckpt, enable_checkpoint, true);
  FLAME_DEFAULT(ckpt, folder, "checkpoint");
  FLAME_DEFAULT(ckpt, interval, 500);
  FLAME_DEFAULT(ckpt, keep_latest_k, 0);
  FLAME_DEFAULT(ckpt, load_step, -1);

  auto* metrics = spec->mutable_metrics();
  FLAME_DEFAULT(metrics, log_freq, 10);

  auto* res = spec->mutable_resources();
  FLAME_DEFAULT(res, ranks, 1);
  FLAME_DEFAULT(res, device, "auto");
  FLAME_DEFAULT(res, max_restarts, 0);
}

#undef FLAME_DEFAULT

absl::Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.model().name() != "fla") {
    return Invalid("model.name", absl::StrCat("must be \"fla\" (got \"", spec.model().name(), "\")"));
  }
  FLAME_RETURN_IF_ERROR(RequireFile("model.config", spec.model().config()));
  FLAME_RETURN_IF_ERROR(ValidateTokenizerPath(spec.model().tokenizer_path()));
  FLAME_RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  FLAME_RETURN_IF_ERROR(ValidateSchedule(spec.lr_scheduler()));
  FLAME_RETURN_IF_ERROR(ValidateTraining(spec.training()));
  FLAME_RETURN_IF_ERROR(ValidateCheckpoint(spec.checkpoint()));
  if (spec.metrics().log_freq() <= 0) {
    return Invalid("metrics.log_freq",
                   absl::StrCat("must be positive (got ", spec.metrics().log_freq(), ")"));
  }
  return ValidateResources(spec.resources());
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
