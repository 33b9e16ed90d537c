// chunk_delta_rule (DeltaNet; fla's chunk_delta_rule, fla.md §2.2):
//
//   S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = scale S_t^T q_t
//
// Fields of ChunkDeltaParams used: everything but a, A_log, dt_bias, da, dA_log, ddt_bias and
// gate_in_kernel. beta is [B,T,H] fp32 (the layer's sigmoid output, or logits with
// beta_sigmoid); qk_l2norm is fla's use_qk_l2norm_in_kernel. Chunk 64, WY representation with
// the triangular inverse, fp32 state and scratch, bf16 q, k, v, o and gradients.
// K and V multiples of 64 (K <= 256); v, d_o and o 16-byte aligned with strides that are
// multiples of 8. Chunk products on tensor cores in bf16, fp32 factors as bf16 hi + lo pairs
// (chunk_delta_tiles.cuh); checked against the fp32 naive recurrence by chunk_delta_rule_test.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/delta_rule/chunk_delta_params.h"

namespace flame::kernels {

// Device scratch the launchers need in params.workspace (256-byte aligned).
size_t DeltaRuleChunkWorkspaceBytes(const ChunkDeltaParams& params, bool backward);

// Size of params.chunk_states, which the caller may keep from the forward to the backward.
size_t DeltaRuleChunkStatesBytes(const ChunkDeltaParams& params);

// Writes o, the per-chunk results the backward reuses when params.chunk_states is set and, when
// params.final_state is set, the final state.
cudaError_t DeltaRuleChunkForward(const ChunkDeltaParams& params, cudaStream_t stream);

// Recomputes the forward (but what params.chunk_states holds), then writes dq, dk, dv,
// dbeta and, when params.d_initial_state is set, the initial-state gradient.
cudaError_t DeltaRuleChunkBackward(const ChunkDeltaParams& params, cudaStream_t stream);

}  // namespace flame::kernels
