// CausalLm: what the trainer needs from any fla model family (fla's *ForCausalLM).
//
// Forward takes input ids and labels of the same shape [B, T] and shifts the labels inside, like
// fla: position t is trained to predict labels[t + 1], the last position is ignored (-100), and
// the loss is the mean cross-entropy over the positions that are not ignored.
//
// Families register a builder in causal_lm.cc (BuildCausalLm). The parameter names of every
// family are fla's (model.embeddings.weight, model.layers.0.attn.q_proj.weight, lm_head.weight,
// ...), so named_parameters() is the state dict a safetensors export writes.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>

#include "worker/config/model_config.h"

namespace flame::worker::model {

inline constexpr int64_t kIgnoreIndex = -100;

struct CausalLmOutput {
  torch::Tensor loss;    // scalar, float32; undefined without labels
  torch::Tensor logits;  // [B, T, vocab]
};

class CausalLm : public torch::nn::Module {
 public:
  // input_ids, labels: int64 [B, T] (labels may be undefined: logits only).
  // cu_seqlens: int64 [N + 1] for packed varlen rows (B == 1), else undefined.
  virtual CausalLmOutput Forward(const torch::Tensor& input_ids, const torch::Tensor& labels,
                                 const torch::Tensor& cu_seqlens = {}) = 0;
};

// A module with parameters that fla initialises in the layer itself rather than in
// _init_weights (Gated DeltaNet's A_log and dt_bias). InitWeights calls it where the module comes
// in its walk, with the same generator.
class CustomInitModule {
 public:
  virtual ~CustomInitModule() = default;
  virtual void InitCustomParameters(at::Generator& generator) = 0;
};

// Builds the model for config.family and initialises it like fla's _init_weights with a
// generator seeded by `seed`, so every rank that uses the same seed gets the same weights.
std::shared_ptr<CausalLm> BuildCausalLm(const ModelConfig& config, uint64_t seed);

// fla's _init_weights: normal(0, std) for Linear, Conv1d and Embedding weights, zero biases,
// norm weights 1. Walks the modules in registration order, so the draw order is fixed.
void InitWeights(torch::nn::Module& model, double std, at::Generator& generator);

// Mean cross-entropy with fla's label shift. logits [B, T, V], labels int64 [B, T].
torch::Tensor ShiftedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels);

// Number of parameters (tied weights counted once, as HF's num_parameters()).
int64_t CountParameters(const torch::nn::Module& model);

}  // namespace flame::worker::model
