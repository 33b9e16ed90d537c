// chunk_gated_delta_rule (Gated DeltaNet; fla's chunk_gated_delta_rule, fla.md §2.1):
//
//   S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = scale S_t^T q_t
//
// With the options fla's GatedDeltaNet layer uses (set all three in ChunkDeltaParams):
//   gate_in_kernel  g_t = -exp(A_log[h]) softplus(a_t + dt_bias[h])  (a [B,T,H], A_log, dt_bias
//   [H]) beta_sigmoid    beta_t = sigmoid(b_t)                              (params.beta holds b)
//   qk_l2norm       q, k <- x / sqrt(sum x^2 + 1e-6);  scale = K^-0.5 is the caller's
// Without gate_in_kernel, params.a is the log decay g itself. The backward writes dq, dk, dv,
// dbeta (db), da, and with the in-kernel gate dA_log and ddt_bias (sums over all tokens).
// Chunk 64, WY representation with the triangular inverse, fp32 state and scratch.
// K and V multiples of 64 (K <= 256); v, d_o and o 16-byte aligned with strides that are
// multiples of 8. Chunk products on tensor cores in TF32 (chunk_delta_tiles.cuh); checked
// against the fp32 naive recurrence by chunk_gated_delta_rule_test.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/delta_rule/chunk_delta_params.h"

namespace flame::kernels {

size_t GatedDeltaRuleChunkWorkspaceBytes(const ChunkDeltaParams& params, bool backward);

// Size of params.chunk_states, which the caller may keep from the forward to the backward.
size_t GatedDeltaRuleChunkStatesBytes(const ChunkDeltaParams& params);

cudaError_t GatedDeltaRuleChunkForward(const ChunkDeltaParams& params, cudaStream_t stream);

cudaError_t GatedDeltaRuleChunkBackward(const ChunkDeltaParams& params, cudaStream_t stream);

}  // namespace flame::kernels
