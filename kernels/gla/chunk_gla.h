// chunk_gla: gated linear attention with one decay per key channel (fla's chunk_gla).
//
//   S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,   o_t = scale * S_t^T q_t
//
// Fields of ChunkGatedParams used: g [B,T,H,K] fp32 (natural-log decay, e.g. logsigmoid(x)/16),
// with g_strides; g_gamma must be null. q, k, v, o, d_o, dq, dk, dv bf16; states and dg fp32;
// intra_scores (bf16) is required, chunk_states (bf16) optional.
// The state layout is [N,H,K,V] (fla's default, state_v_first=False).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/common/chunk_gated_params.h"

namespace flame::kernels {

size_t GlaChunkWorkspaceBytes(const ChunkGatedParams& params, bool backward);

// Size of params.intra_scores, which the caller keeps from the forward to the backward.
size_t GlaChunkScoresBytes(const ChunkGatedParams& params);

// Size of params.chunk_states, which the caller may keep from the forward to the backward.
size_t GlaChunkStatesBytes(const ChunkGatedParams& params);

// Writes o, the intra-chunk scores, the per-chunk states when params.chunk_states is set and,
// when params.final_state is set, the final state.
cudaError_t GlaChunkForward(const ChunkGatedParams& params, cudaStream_t stream);

// Recomputes the states (unless params.chunk_states holds the forward's), then writes dq, dk,
// dv, dg and, when params.d_initial_state is set, the initial-state gradient; reads the scores
// the forward wrote.
cudaError_t GlaChunkBackward(const ChunkGatedParams& params, cudaStream_t stream);

// Whether a launch of these sizes (batch or cu_seqlens' sequences, heads, k_dim, v_dim) takes
// the states by the sequential state pass rather than by each chunk's update and a scan over the
// chunks. Both are exact; the choice is speed, by how much of the current device the pass's grid
// fills. For tests that must cover both, and for profiles.
cudaError_t GlaChunkUsesStatePass(const ChunkGatedParams& params, bool backward, bool* uses);

}  // namespace flame::kernels
