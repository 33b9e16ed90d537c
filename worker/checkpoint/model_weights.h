// A model's weights <-> a safetensors file, with fla's parameter names.
//
// named_parameters() of every family already carries fla's names (causal_lm.h), so the state dict
// HF transformers + fla expect is exactly the parameter list. Tied embeddings: a tied model has no
// lm_head parameter, and the file holds model.embeddings.weight only, as HF's save_pretrained
// writes a tied model; a file that also carries lm_head.weight loads into a tied model when the
// two are equal (some exporters write both).
//
// Loading is strict: a tensor the model needs that the file lacks, a tensor the model does not
// have, a shape mismatch, or a dtype other than F32/F16/BF16 is an error naming the tensor.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/checkpoint/safetensors.h"

namespace flame::worker {

// "float32" | "bfloat16" | "float16" (checkpoint.export_dtype) -> the Torch dtype.
absl::StatusOr<torch::ScalarType> ParseExportDtype(const std::string& name);

// Writes every parameter of `model`, cast to `dtype`, to `path` (metadata {"format": "pt"}).
absl::Status SaveModelWeights(torch::nn::Module& model, const std::string& path,
                              torch::ScalarType dtype);

// Copies the tensors of `file` into `model`'s parameters, cast to each parameter's dtype.
absl::Status LoadModelWeights(const safetensors::File& file, const std::string& source,
                              torch::nn::Module& model);
absl::Status LoadModelWeights(const std::string& path, torch::nn::Module& model);

}  // namespace flame::worker
