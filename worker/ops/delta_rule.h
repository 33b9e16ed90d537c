// The delta rule (DeltaNet) and the gated delta rule (Gated DeltaNet), fla's `chunk_delta_rule`
// and `chunk_gated_delta_rule` contracts with the input transforms left to the layer:
//
//   S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ       S: [K, V] per head
//   o_t = S_tᵀ (scale · q_t)                                  α_t = exp(g_t); α = 1 without g
//
// Layout [B, T, H, D], as gla.h:
//   q, k         [B, T, H, K]   used as given: the layer L2-normalises them first (fla's
//                               use_qk_l2norm_in_kernel), which keeps every I − β k kᵀ a
//                               contraction for β in [0, 2]
//   v            [B, T, H, V]
//   beta         [B, T, H]      the write strength (the layer's sigmoid, not logits)
//   g            [B, T, H]      natural-log decay per head and token (<= 0), gated rule only
//   initial_state / final_state  [N, H, K, V], float32 (float64 for float64 inputs)
//   cu_seqlens   int64 [N + 1]  packed varlen rows (B == 1); chunks never cross a sequence and
//                               every sequence starts from its own state
// Grouped value heads (fla's num_v_heads > num_heads) are the layer's business: it repeats q and
// k to v's heads before the call. The output has v's dtype; the arithmetic is float32 (float64
// for float64 inputs).
//
// ChunkDeltaRule and ChunkGatedDeltaRule are the entry points the models call. In FLAME_CUDA builds
// CUDA tensors go to kernels/delta_rule and kernels/gated_delta_rule (delta_rule_cuda.cc, bf16
// compute); everything else, and any shape those kernels cannot take, runs the differentiable
// ATen reference of delta_rule_chunk_reference.cc. Naive* are the step-by-step recurrences that
// tests compare against.
#pragma once

#include <torch/types.h>

namespace flame::worker::ops {

struct DeltaRuleOutput {
  torch::Tensor output;       // [B, T, H, V]
  torch::Tensor final_state;  // [N, H, K, V], undefined unless requested
};

// fla's chunk length for both delta rules.
inline constexpr int64_t kDeltaRuleChunkSize = 64;

DeltaRuleOutput ChunkDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& beta, double scale,
                               const torch::Tensor& initial_state = {},
                               bool output_final_state = false,
                               const torch::Tensor& cu_seqlens = {});

DeltaRuleOutput ChunkGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& g,
                                    const torch::Tensor& beta, double scale,
                                    const torch::Tensor& initial_state = {},
                                    bool output_final_state = false,
                                    const torch::Tensor& cu_seqlens = {});

// The recurrences above, one time step at a time (differentiable; slow; for tests).
DeltaRuleOutput NaiveDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& beta, double scale,
                               const torch::Tensor& initial_state = {},
                               bool output_final_state = false,
                               const torch::Tensor& cu_seqlens = {});

DeltaRuleOutput NaiveGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& g,
                                    const torch::Tensor& beta, double scale,
                                    const torch::Tensor& initial_state = {},
                                    bool output_final_state = false,
                                    const torch::Tensor& cu_seqlens = {});

// The chunked algorithm (WY representation, chunk 64) in plain ATen ops, for any device. g may
// be undefined: the ungated delta rule.
DeltaRuleOutput ChunkDeltaRuleReference(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& g,
                                        const torch::Tensor& beta, double scale,
                                        const torch::Tensor& initial_state, bool output_final_state,
                                        const torch::Tensor& cu_seqlens);

}  // namespace flame::worker::ops
