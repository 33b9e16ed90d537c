// Parameters shared by the gated chunk kernels: chunk_gla (per-channel gate) and chunk_simple_gla
// (per-head gate, or RetNet's constant per-head decay). Plain C++ with CUDA types only, so that
// worker/ops can fill it from tensors without this folder knowing about Torch.
//
// Recurrence (per sequence n, head h; S is K x V, fp32):
//   S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,   o_t = scale * S_t^T q_t,   S_0 = initial_state.
// g is a natural-log decay (<= 0): [B,T,H,K] for GLA, [B,T,H] (broadcast over K) for simple GLA,
// or g_t = g_gamma[h] for every t (RetNet).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace flame::kernels {

// Strides in elements of a [B, T, H, D] tensor; the last dimension must be contiguous.
// With cu_seqlens, B is 1 and `batch` is unused.
struct TensorStrides {
  int64_t batch = 0;
  int64_t token = 0;
  int64_t head = 0;
};

// Contiguous [B, T, H, D] strides.
inline TensorStrides ContiguousStrides(int seq_len, int heads, int dim) {
  return {int64_t{seq_len} * heads * dim, int64_t{heads} * dim, dim};
}

struct ChunkGatedParams {
  // --- sizes ---
  int batch = 0;     // B (1 when cu_seqlens is set)
  int seq_len = 0;   // T (the packed length with cu_seqlens)
  int heads = 0;     // H
  int k_dim = 0;     // K: a multiple of 64
  int v_dim = 0;     // V: a multiple of 64
  float scale = 0;   // usually K^-0.5

  // --- variable-length batches (optional) ---
  // cu_seqlens: device int32 [N+1], strictly increasing, cu_seqlens[N] <= T; null means N = B
  // sequences of length T. chunk_offsets: device int32 [N+1], prefix sums of ceil(len/64)
  // (ChunkOffsets() below builds it on the host). total_chunks = chunk_offsets[N].
  int num_seqs = 0;  // N
  const int32_t* cu_seqlens = nullptr;
  const int32_t* chunk_offsets = nullptr;
  int total_chunks = 0;

  // --- inputs (bf16 q, k, v; fp32 gates and states) ---
  const __nv_bfloat16* q = nullptr;  // [B,T,H,K]
  const __nv_bfloat16* k = nullptr;  // [B,T,H,K], same strides as q
  const __nv_bfloat16* v = nullptr;  // [B,T,H,V]
  TensorStrides qk_strides;          // q, k, dq, dk
  TensorStrides v_strides;           // v, o, d_o, dv
  const float* g = nullptr;          // gla: [B,T,H,K]; simple gla: [B,T,H]; null with g_gamma
  TensorStrides g_strides;           // g and dg (simple gla: head stride 1, no feature dim)
  const float* g_gamma = nullptr;    // simple gla only: [H] constant log decay per head
  const float* initial_state = nullptr;  // [N,H,K,V] fp32, optional

  // --- forward outputs ---
  __nv_bfloat16* o = nullptr;     // [B,T,H,V]
  float* final_state = nullptr;   // [N,H,K,V] fp32, optional

  // --- backward (inputs d_o, d_final_state; outputs the rest) ---
  const __nv_bfloat16* d_o = nullptr;    // [B,T,H,V]
  const float* d_final_state = nullptr;  // [N,H,K,V], optional
  __nv_bfloat16* dq = nullptr;
  __nv_bfloat16* dk = nullptr;
  __nv_bfloat16* dv = nullptr;
  float* dg = nullptr;                   // like g; not written with g_gamma
  float* d_initial_state = nullptr;      // [N,H,K,V], optional

  // --- the intra-chunk scores, kept from the forward for the backward ---
  // [total chunks, H, 64, 64] bf16 (GlaChunkScoresBytes, SimpleGlaChunkScoresBytes), 16-byte
  // aligned, required by every launcher. The forward writes the masked scores there; the
  // backward, given the same q, k, gate and sequences, reads them instead of recomputing them
  // (fla's chunk_gla keeps its A the same way).
  __nv_bfloat16* intra_scores = nullptr;

  // --- the per-chunk states, kept from the forward for the backward (optional) ---
  // [total chunks, H, K, V] bf16 (GlaChunkStatesBytes, SimpleGlaChunkStatesBytes), 16-byte
  // aligned. Set for the forward, it writes the state entering each chunk there (instead of into
  // its workspace); set for the backward, given the same inputs, the backward reads them instead
  // of recomputing them -- one sequential pass over the chunks instead of two. Null: the backward
  // recomputes them (less memory kept between the passes: the states are K V / 32 bytes per
  // token and head, 2/3 of q, k and v at K = V = 128, 4/3 at 256). The workspace sizes depend on
  // whether it is set.
  __nv_bfloat16* chunk_states = nullptr;

  // Device scratch of at least the family's *WorkspaceBytes(params, backward) bytes, 256-aligned.
  void* workspace = nullptr;
};

constexpr int kGatedChunkSize = 64;

// Host helper: chunk offsets of a cu_seqlens vector (prefix sums of ceil(len / 64)).
inline std::vector<int32_t> ChunkOffsets(const std::vector<int32_t>& cu_seqlens) {
  std::vector<int32_t> offsets(cu_seqlens.size(), 0);
  for (size_t n = 1; n < cu_seqlens.size(); ++n) {
    const int32_t len = cu_seqlens[n] - cu_seqlens[n - 1];
    offsets[n] = offsets[n - 1] + (len + kGatedChunkSize - 1) / kGatedChunkSize;
  }
  return offsets;
}

}  // namespace flame::kernels
