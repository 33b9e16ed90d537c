// flame's own command-line form for `flamectl submit`, so that the arguments of a flame
// `train.sh` command work unchanged:
//
//   flamectl submit -- --job.config_file fla.toml --training.steps 100 --training.varlen
//       --checkpoint.no_initial_load_model_weights_only --optimizer.lr=1e-3
//
// As in flame, the TOML named by --job.config_file is read first and each `--section.key`
// overrides it (command line > TOML > defaults). A boolean key without a value means true
// (flame's store_true), `--section.key=value` also works, and string_list options take a
// comma-separated value. The `--` is optional: flamectl's own options never contain a dot, so
// any `--section.key` argument after `submit` is taken to be flame's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flame/v1/job_spec.pb.h"

namespace flame::client {

// The arguments of one command line, split in two: those for flamectl's own parser (argv[0]
// included) and, when the command is `submit`, the flame-style ones in their order.
struct SplitCommandLine {
  std::vector<std::string> own;
  std::vector<std::string> flame;
};
SplitCommandLine SplitFlameArguments(const std::vector<std::string>& argv);

// One `--section.key [value]`; `value` is unset for a boolean flag given alone.
struct FlameArgument {
  std::string key;  // "training.steps"
  std::optional<std::string> value;
};

// Flame-style arguments parsed: the job file (--job.config_file) and the overrides in order.
struct FlameArguments {
  std::string config_file;  // as given, relative to the current directory
  std::vector<FlameArgument> overrides;
};

// Groups the arguments into keys and values. Unknown keys are INVALID_ARGUMENT with the same
// "did you mean" as a job file's; so are a missing value and an argument that is not a key.
absl::StatusOr<FlameArguments> ParseFlameArguments(const std::vector<std::string>& args);

// Applies the overrides in order; relative paths resolve against `base_dir`.
absl::Status ApplyFlameArguments(const FlameArguments& args, const std::string& base_dir,
                                 flame::v1::JobSpec* spec);

// train.sh's NGPU: the number of ranks, when nothing else set resources.ranks. `ngpu` is the
// variable's value (unset: nothing to do).
absl::Status ApplyNgpu(const std::optional<std::string>& ngpu, flame::v1::JobSpec* spec);

}  // namespace flame::client
