// Training FLOPs per token, per architecture, for MFU (model FLOPs utilisation).
//
// flame counts 6 x (all parameters but direct nn.Embedding children) + 12·L·H·d_head·T for every
// model, i.e. a softmax-attention term even for linear attention, and (on HF wrappers) with the
// embedding table inside the 6N. Here the count is
//
//   6 · N_matmul  +  3 · L · mixer_forward_flops_per_token(T)
//
// where N_matmul is the weights of every matrix multiply a token goes through: each layer's
// projections and MLP, and lm_head (also when tied to the embedding: the product is still done);
// not the input embedding (a table lookup), norms, biases or short convolutions (elementwise).
// The mixer term is what the token-mixing op itself multiplies (scores, state updates) and
// depends on the family; backward costs twice the forward, hence 3x.
//
// Pure arithmetic on ModelConfig (no Torch): the trainer calls it once at start-up.
#pragma once

#include <cstdint>

#include "worker/config/model_config.h"

namespace flame::worker {

// The count for any family, for sequences of `seq_len_or_context_len` tokens (seq_len, or
// context_len in varlen mode): GLA below; the transformer, RetNet, DeltaNet and Gated DeltaNet
// counts live beside their options (TransformerOptions::TrainingFlopsPerToken, ...), each with its
// derivation, under the same convention.
double TrainingFlopsPerToken(const ModelConfig& config, int64_t seq_len_or_context_len);

// GLA's two terms (config.family must be kGla):
// matrix-multiply weights per token: every layer's projections and MLP, plus lm_head;
int64_t MatmulParameterCount(const ModelConfig& config);
// forward FLOPs of one layer's chunk_gla per token (not its projections).
double MixerForwardFlopsPerToken(const ModelConfig& config, int64_t seq_len_or_context_len);

}  // namespace flame::worker
