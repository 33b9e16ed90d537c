// Checkpoints on disk: <root>/step-N/ directories that are either complete or absent.
//
// Two kinds (a checkpoint is exactly the union of the trainer's state dicts):
//   full          model.pt             LibTorch archive of the model (fla parameter names)
//                 optimizer.pt         LibTorch archive of the optimizer (AdamW moments, steps)
//                 rng.pt               the default CPU generator's state
//                 train_state.json     step, tokens, skipped steps, LR scheduler steps, elapsed
//                                      seconds, spec hash, world size
//                 data_positions.json  every rank's data position, index = rank
//   weights-only  model.safetensors    the weights in export_dtype (the final save with
//                                      checkpoint.last_save_model_weights_only, and the seed
//                                      checkpoint step-0 in float32)
//                 train_state.json
// and manifest.json, written last: format, kind, step, tokens, config hash, world size, the data
// positions, which file holds the RNG state, and per file its size and CRC-32.
//
// Save writes into a hidden sibling (.step-N.tmp-<pid>), fsyncs every file and the directory,
// renames it to step-N and fsyncs the root: a crash leaves either no step-N or a whole one. A
// step-N whose manifest is missing or does not match its files (torn copy, disk corruption) is
// never loaded: FindNewestValid skips it with a warning.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/config/train_config.h"
#include "worker/progress.h"

namespace flame::worker {

struct TrainState {
  int64_t step = 0;
  int64_t tokens = 0;  // all ranks
  int64_t skipped_steps = 0;
  double elapsed_seconds = 0;  // all attempts
  // Steps the LR schedule has taken; equals step unless a load excluded one of the two.
  int64_t lr_scheduler_steps = 0;
};

enum class CheckpointKind { kFull, kWeightsOnly };

// The non-tensor part of a checkpoint.
struct CheckpointState {
  TrainState train_state;
  std::string spec_hash;
  int64_t world_size = 1;
  std::vector<std::string> data_positions;      // encoded DataPosition of every rank (full only)
  CheckpointKind kind = CheckpointKind::kFull;  // set by Load
};

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string root) : root_(std::move(root)) {}

  // Writes step-<state.train_state.step>/ atomically (replacing an older copy of the same step).
  absl::StatusOr<CheckpointInfo> Save(const CheckpointState& state, torch::nn::Module& model,
                                      torch::optim::Optimizer& optimizer);

  // Writes a weights-only step-N: the parameters cast to `dtype`, and the train state.
  absl::StatusOr<CheckpointInfo> SaveWeightsOnly(const CheckpointState& state,
                                                 torch::nn::Module& model, torch::ScalarType dtype);

  // Verifies step-N, then loads it into `model` and `optimizer` (whose parameters must have
  // the saved shapes) and restores the CPU generator.
  absl::Status Load(int64_t step, CheckpointState* state, torch::nn::Module& model,
                    torch::optim::Optimizer& optimizer);
  // The same for any checkpoint folder, restoring only `parts`: the model, the optimizer (full
  // checkpoints), and the CPU generator with the train state. `state` always receives the train
  // state, data positions and kind, for the caller to apply what it restores.
  // `optimizer` may be null when parts.optimizer is false. It does not verify: callers run
  // VerifyDirectory first.
  static absl::Status LoadDirectory(const std::string& dir, const CheckpointComponents& parts,
                                    CheckpointState* state, torch::nn::Module& model,
                                    torch::optim::Optimizer* optimizer);

  // OK when step-N has a manifest and every file matches its size and checksum.
  absl::Status Verify(int64_t step) const;
  // The same for any checkpoint folder; `step` >= 0 also requires the manifest to be that step's.
  static absl::Status VerifyDirectory(const std::string& dir, int64_t step = -1);
  // Whether `dir` looks like one of our checkpoints (it has a manifest), valid or not.
  static bool IsCheckpointDirectory(const std::string& dir);

  // Steps of the step-N directories, ascending (valid or not).
  std::vector<int64_t> ListSteps() const;
  // The newest step that verifies; nullopt when there is none. Logs every one it skips.
  std::optional<int64_t> FindNewestValid() const;
  // Deletes all but the newest `keep_latest_k` step directories (0 keeps all).
  absl::Status Prune(int64_t keep_latest_k);
  // Deletes leftovers of interrupted saves (.step-*.tmp-*).
  absl::Status RemoveTemporaries();

  std::string StepPath(int64_t step) const;
  const std::string& root() const { return root_; }

 private:
  // Writes a checkpoint of `kind` through `write_contents(temporary dir)`, then its manifest,
  // and publishes it atomically.
  absl::StatusOr<CheckpointInfo> SaveAs(
      const CheckpointState& state, CheckpointKind kind,
      const std::function<absl::Status(const std::string&)>& write_contents);

  std::string root_;
};

}  // namespace flame::worker
