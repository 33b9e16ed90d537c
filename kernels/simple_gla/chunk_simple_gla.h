// chunk_simple_gla: linear attention with one decay per head and token (fla's chunk_simple_gla;
// RetNet's chunk_retention is the constant-decay case, g_gamma[h] = log(1 - 2^(-5-h))).
//
//   S_t = exp(g_t) S_{t-1} + k_t v_t^T,   o_t = scale * S_t^T q_t
//
// Fields of ChunkGatedParams used: g [B,T,H] fp32 (natural-log decay) XOR g_gamma [H] fp32;
// g_strides.head is the stride between heads of g (1 when contiguous). q, k, v, o, d_o, dq, dk,
// dv bf16; states and dg fp32; intra_scores (bf16) is required, chunk_states (bf16) optional.
// With g_gamma no gate gradient is produced.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/common/chunk_gated_params.h"

namespace flame::kernels {

// Device scratch the launchers need in params.workspace.
size_t SimpleGlaChunkWorkspaceBytes(const ChunkGatedParams& params, bool backward);

// Size of params.intra_scores, which the caller keeps from the forward to the backward.
size_t SimpleGlaChunkScoresBytes(const ChunkGatedParams& params);

// Size of params.chunk_states, which the caller may keep from the forward to the backward.
size_t SimpleGlaChunkStatesBytes(const ChunkGatedParams& params);

// Writes o, the intra-chunk scores, the per-chunk states when params.chunk_states is set and,
// when params.final_state is set, the final state.
cudaError_t SimpleGlaChunkForward(const ChunkGatedParams& params, cudaStream_t stream);

// Recomputes the states (unless params.chunk_states holds the forward's), then writes dq, dk,
// dv, dg (when g is given) and, when params.d_initial_state is set, the initial-state gradient;
// reads the scores the forward wrote.
cudaError_t SimpleGlaChunkBackward(const ChunkGatedParams& params, cudaStream_t stream);

}  // namespace flame::kernels
