// Export of a checkpoint to the folder HF transformers + fla load, and import of such a folder.
//
// An export folder holds:
//   model.safetensors   every parameter under fla's name, in the requested dtype
//   config.json         the job's model config as given, with vocab_size as trained (flame raises
//                       it to the tokenizer's size) and torch_dtype set to the export dtype
//   tokenizer.model     a copy of the tokenizer, when one is given (tokenizer.json keeps its name)
// and, on request, a reference for tests/worker/fla_load_check.py: input_ids.npy (int64 [B, T])
// and expected_logits.npy (float32 [B, T, vocab]), our logits for those ids with the exported
// weights.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/config/model_config.h"
#include "worker/model/causal_lm.h"

namespace flame::worker {

struct ExportRequest {
  std::string checkpoint;    // a step-N folder written by CheckpointStore (either kind)
  std::string model_config;  // the job's config.json
  std::string output;        // created when missing; files in it are replaced
  std::string dtype = "float32";
  std::string tokenizer;          // optional
  bool reference_logits = false;  // also write input_ids.npy and expected_logits.npy
};

// Writes the export folder; errors name the bad input (missing files, a checkpoint of another
// model, an unknown dtype).
absl::Status ExportCheckpoint(const ExportRequest& request);

// The model of `config` with the weights of checkpoint folder `dir`, where config.vocab_size is
// replaced by the vocabulary size the checkpoint was trained with.
absl::StatusOr<std::shared_ptr<model::CausalLm>> LoadCheckpointModel(const std::string& dir,
                                                                     ModelConfig config);

// Whether `dir` is an HF-style folder (model.safetensors beside config.json).
bool IsHfFolder(const std::string& dir);
// Loads model.safetensors of an HF-style folder into `model` (any F32/F16/BF16 weights).
absl::Status ImportHfFolder(const std::string& dir, torch::nn::Module& model);

// Writes input_ids.npy and expected_logits.npy into `dir`: fixed ids (a seeded generator) and
// `model`'s float32 logits for them.
absl::Status WriteReferenceLogits(model::CausalLm& model, int64_t vocab_size,
                                  const std::string& dir);

}  // namespace flame::worker
