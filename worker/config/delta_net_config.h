// The delta-rule families' part of config.json: parsers for model_config.cc's family table, and
// the per-token training FLOP count that MFU needs for each of them.
#pragma once

#include "absl/status/status.h"
#include "worker/config/model_config.h"

namespace flame::worker {
namespace internal {
class FieldReader;  // config_fields.h, internal to flame_worker_config
}  // namespace internal

// Read and validate DeltaNetOptions / GatedDeltaNetOptions from `r` into c->delta_net /
// c->gated_deltanet (the shared fields are already in *c). Errors name the key.
absl::Status ParseDeltaNetOptions(const internal::FieldReader& r, ModelConfig* c);
absl::Status ParseGatedDeltaNetOptions(const internal::FieldReader& r, ModelConfig* c);

// Forward FLOPs per token of the chunk-64 delta rule, per head, with key dim K and value dim V
// (2 FLOPs per multiply-add). A chunk of C = 64 tokens does, with dense C×C products counted at
// full size (the tensor-core tiles compute them whole):
//   K Kᵀ, Q Kᵀ                    2 · 2C²K
//   the triangular inverse        C³/3     (unit lower triangular: Σ_i Σ_j<i (i − j) ≈ C³/6 MACs)
//   U0 = T βV, W = T βK           2C²V + 2C²K
//   U = U0 − W S, S += Kᵀ U, Q S  3 · 2CKV
//   (Q Kᵀ ⊙ decay) U              2C²V
// = C(6KV + 6CK + 4CV + C²/3) per chunk, so per token 6KV + C(6K + 4V) + C²/3: constant in the
// sequence length (no T² term). Gates, β and decay factors are elementwise and left out.
double DeltaRuleForwardFlopsPerToken(int64_t key_dim, int64_t value_dim);

// Training FLOPs per token (forward + backward = 3 × forward) of the whole model: every
// projection (2 · in · out), the short convolutions (2 · conv_size per channel), the delta rule of
// every head, the SwiGLU MLP and the lm_head; embeddings, norms and activations are left out.
// config.family must be kDeltaNet, respectively kGatedDeltaNet.
double DeltaNetTrainingFlopsPerToken(const ModelConfig& config);
double GatedDeltaNetTrainingFlopsPerToken(const ModelConfig& config);

}  // namespace flame::worker
