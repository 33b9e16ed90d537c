#include "common/job_spec_options.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec_checks.h"
#include "common/status_macros.h"

namespace flame {
namespace {

using spec_checks::RequireNonNegative;
using spec_checks::RequireOneOf;
using spec_checks::RequirePositive;
using spec_checks::RequireValue;
using spec_checks::SplitList;
using spec_checks::Unsupported;

std::string Quoted(const std::string& text) { return absl::StrCat("\"", text, "\""); }

// A flag that must stay off.
absl::Status RequireOff(absl::string_view key, bool value, absl::string_view why) {
  return RequireValue(key, !value, "false", "true", why);
}

// A csv option whose entries may each be empty (flame's default) or `allowed`.
absl::Status RequireEntries(absl::string_view key, const std::string& csv,
                            const std::string& allowed, absl::string_view why) {
  for (const std::string& entry : SplitList(csv, /*keep_empty=*/true)) {
    FLAME_RETURN_IF_ERROR(RequireValue(key, entry.empty() || entry == allowed,
                                       absl::StrCat("unset or \"", allowed, "\""), Quoted(entry),
                                       why));
  }
  return absl::OkStatus();
}

// flame reads datasets through Hugging Face `datasets`; we read local files named in
// training.dataset, so the options that select inside a hub dataset have no meaning here.
absl::Status ValidateDataSources(const flame::v1::TrainingSection& t) {
  FLAME_RETURN_IF_ERROR(RequireEntries(
      "training.dataset_name", t.dataset_name(), "default",
      "datasets are local files, which have no configurations; prepare the configuration you "
      "want as files and name them in training.dataset"));
  FLAME_RETURN_IF_ERROR(RequireEntries(
      "training.dataset_split", t.dataset_split(), "train",
      "every file in training.dataset is trained on; name the files of the split you want"));
  if (!SplitList(t.data_dir()).empty()) {
    return Unsupported("training.data_dir", "name the files or folders in training.dataset");
  }
  if (!SplitList(t.data_files()).empty()) {
    return Unsupported("training.data_files", "name the files in training.dataset");
  }
  return RequirePositive("training.prefetch_factor", t.prefetch_factor());
}

// Every rank is a data-parallel rank: flame's replicate x shard mesh must cover them all, and
// no rank may hold a slice of a layer (tensor parallelism) or of the sequence.
absl::Status ValidateParallelism(const flame::v1::JobSpec& spec) {
  const flame::v1::TrainingSection& t = spec.training();
  const int64_t ranks = spec.resources().ranks();
  const int64_t replicate = t.data_parallel_replicate_degree();
  const int64_t shard = t.data_parallel_shard_degree();
  FLAME_RETURN_IF_ERROR(RequirePositive("training.data_parallel_replicate_degree", replicate));
  if (shard != -1 && shard <= 0) {
    return spec_checks::Invalid("training.data_parallel_shard_degree",
                                absl::StrCat("must be -1 or positive (got ", shard, ")"));
  }
  const bool covers = shard == -1 ? ranks % replicate == 0 : replicate * shard == ranks;
  if (!covers) {
    return spec_checks::Invalid(
        "training.data_parallel_shard_degree",
        absl::StrCat("x training.data_parallel_replicate_degree must equal resources.ranks (",
                     shard == -1 ? "-1 takes the ranks left over; " : "", "got ", shard, " x ",
                     replicate, " for ", ranks, " ranks)"));
  }
  const absl::string_view dp_only = "this service trains with data parallelism only";
  FLAME_RETURN_IF_ERROR(RequireValue("training.tensor_parallel_degree",
                                     t.tensor_parallel_degree() == 1, "1",
                                     absl::StrCat(t.tensor_parallel_degree()), dp_only));
  const flame::v1::ExperimentalSection& e = spec.experimental();
  FLAME_RETURN_IF_ERROR(RequireValue(
      "experimental.pipeline_parallel_degree", e.pipeline_parallel_degree() == 1, "1",
      absl::StrCat(e.pipeline_parallel_degree()), "flame raises NotImplementedError for it too"));
  FLAME_RETURN_IF_ERROR(RequireValue("experimental.context_parallel_degree",
                                     e.context_parallel_degree() == 1, "1",
                                     absl::StrCat(e.context_parallel_degree()), dp_only));
  FLAME_RETURN_IF_ERROR(RequireOff("training.enable_cpu_offload", t.enable_cpu_offload(),
                                   "parameters and optimizer state stay on the device"));
  FLAME_RETURN_IF_ERROR(RequireOneOf("training.fsdp_reshard_after_forward",
                                     t.fsdp_reshard_after_forward(),
                                     {"default", "always", "never"}));
  return RequireOneOf("experimental.context_parallel_rotate_method",
                      e.context_parallel_rotate_method(), {"allgather", "alltoall"});
}

absl::Status ValidatePrecision(const flame::v1::JobSpec& spec) {
  const flame::v1::TrainingSection& t = spec.training();
  FLAME_RETURN_IF_ERROR(
      RequireValue("training.mixed_precision_param", t.mixed_precision_param() == "bfloat16",
                   "\"bfloat16\"", Quoted(t.mixed_precision_param()),
                   "GPU ranks compute in bf16 with fp32 master weights (CPU ranks in fp32)"));
  FLAME_RETURN_IF_ERROR(RequireValue(
      "training.mixed_precision_reduce", t.mixed_precision_reduce() == "float32", "\"float32\"",
      Quoted(t.mixed_precision_reduce()), "gradients are reduced in fp32"));
  const absl::string_view no_fp8 = "float8 training is not supported";
  FLAME_RETURN_IF_ERROR(RequireValue("model.converters",
                                     SplitList(spec.model().converters()).empty(), "empty",
                                     Quoted(spec.model().converters()),
                                     "there are no model converters (float8 is not supported)"));
  const flame::v1::Float8Section& f = spec.float8();
  FLAME_RETURN_IF_ERROR(RequireOff("float8.enable_fsdp_float8_all_gather",
                                   f.enable_fsdp_float8_all_gather(), no_fp8));
  FLAME_RETURN_IF_ERROR(RequireOff("float8.precompute_float8_dynamic_scale_for_fsdp",
                                   f.precompute_float8_dynamic_scale_for_fsdp(), no_fp8));
  FLAME_RETURN_IF_ERROR(RequireOff("float8.force_recompute_fp8_weight_in_bwd",
                                   f.force_recompute_fp8_weight_in_bwd(), no_fp8));
  return RequireValue("float8.recipe_name", f.recipe_name().empty(), "unset",
                      Quoted(f.recipe_name()), no_fp8);
}

// activation_checkpoint.selective_ac_option: "op" or a positive layer period, as in flame.
absl::Status ValidateActivationOptions(const flame::v1::JobSpec& spec) {
  const flame::v1::ActivationCheckpointSection& ac = spec.activation_checkpoint();
  FLAME_RETURN_IF_ERROR(
      RequireOneOf("activation_checkpoint.mode", ac.mode(), {"none", "full", "selective"}));
  int64_t period = 0;
  if (ac.selective_ac_option() != "op" &&
      !(absl::SimpleAtoi(ac.selective_ac_option(), &period) && period > 0)) {
    return spec_checks::Invalid("activation_checkpoint.selective_ac_option",
                                absl::StrCat("must be \"op\" or a positive integer (got ",
                                             Quoted(ac.selective_ac_option()), ")"));
  }
  return RequireValue("activation_offload.mode", spec.activation_offload().mode() == "none",
                      "\"none\"", Quoted(spec.activation_offload().mode()),
                      "activation offloading is not supported (flame does not wire it either)");
}

absl::Status ValidateOtherOptions(const flame::v1::JobSpec& spec) {
  const flame::v1::OptimizerSection& o = spec.optimizer();
  FLAME_RETURN_IF_ERROR(RequireOneOf("optimizer.implementation", o.implementation(),
                                     {"for-loop", "foreach", "fused"}));
  FLAME_RETURN_IF_ERROR(RequireOff("optimizer.early_step_in_backward", o.early_step_in_backward(),
                                   "the optimizer steps after clipping, as flame's loop does"));
  FLAME_RETURN_IF_ERROR(RequireOff(
      "profiling.enable_memory_snapshot", spec.profiling().enable_memory_snapshot(),
      "CUDA allocator snapshots are not supported; memory peaks are in the step metrics"));
  FLAME_RETURN_IF_ERROR(RequirePositive("training.gc_freq", spec.training().gc_freq()));
  FLAME_RETURN_IF_ERROR(RequireValue(
      "experimental.custom_model_path", spec.experimental().custom_model_path().empty(), "empty",
      Quoted(spec.experimental().custom_model_path()),
      "models are built from model.config's model_type; there are no Python model modules"));
  FLAME_RETURN_IF_ERROR(RequireOff("fault_tolerance.enable", spec.fault_tolerance().enable(),
                                   "flamed restarts failed jobs from their last checkpoint "
                                   "(resources.max_restarts)"));
  const flame::v1::CommSection& c = spec.comm();
  FLAME_RETURN_IF_ERROR(RequirePositive("comm.init_timeout_seconds", c.init_timeout_seconds()));
  FLAME_RETURN_IF_ERROR(RequirePositive("comm.train_timeout_seconds", c.train_timeout_seconds()));
  FLAME_RETURN_IF_ERROR(RequireNonNegative("comm.trace_buf_size", c.trace_buf_size()));
  if (spec.checkpoint().create_seed_checkpoint() && spec.resources().ranks() != 1) {
    return spec_checks::Invalid("checkpoint.create_seed_checkpoint",
                                absl::StrCat("needs resources.ranks = 1 (got ",
                                             spec.resources().ranks(), "), as in flame"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateFlameOptions(const flame::v1::JobSpec& spec) {
  FLAME_RETURN_IF_ERROR(ValidateDataSources(spec.training()));
  FLAME_RETURN_IF_ERROR(ValidateParallelism(spec));
  FLAME_RETURN_IF_ERROR(ValidatePrecision(spec));
  FLAME_RETURN_IF_ERROR(ValidateActivationOptions(spec));
  return ValidateOtherOptions(spec);
}

}  // namespace flame
