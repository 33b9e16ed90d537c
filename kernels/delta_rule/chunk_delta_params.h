// Parameters of the delta-rule chunk kernels: chunk_delta_rule (DeltaNet) and
// chunk_gated_delta_rule (Gated DeltaNet). Plain C++ with CUDA types only, so that worker/ops can
// fill it from tensors without this folder knowing about Torch.
//
// Recurrence (per sequence n, head h; S is K x V, fp32; see delta_rule_reference.h):
//   S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = scale S_t^T q_t
// with g = 0 for chunk_delta_rule. In-kernel input transforms (fla's GatedDeltaNet layer):
//   qk_l2norm:       q, k <- x / sqrt(sum x^2 + 1e-6)
//   beta_sigmoid:    beta_t = sigmoid(b_t), else beta_t = b_t
//   gate_in_kernel:  g_t = -exp(A_log[h]) softplus(a_t + dt_bias[h]), else g_t = a_t
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"  // TensorStrides, ChunkOffsets

namespace flame::kernels {

constexpr int kDeltaChunkSize = 64;  // chunk length; ChunkOffsets() uses the same 64
constexpr int kDeltaMaxKDim = 256;   // K <= 256 (the state passes keep K x 64 fp32 on chip)

struct ChunkDeltaParams {
  // --- sizes ---
  int batch = 0;    // B (1 when cu_seqlens is set)
  int seq_len = 0;  // T (the packed length with cu_seqlens)
  int heads = 0;    // H
  int k_dim = 0;    // K <= 256
  int v_dim = 0;    // V
  float scale = 0;  // usually K^-0.5

  // --- variable-length batches (optional), as in ChunkGatedParams ---
  // cu_seqlens: device int32 [N+1], strictly increasing; chunk_offsets: device int32 [N+1],
  // ChunkOffsets(cu_seqlens); total_chunks = chunk_offsets[N].
  int num_seqs = 0;
  const int32_t* cu_seqlens = nullptr;
  const int32_t* chunk_offsets = nullptr;
  int total_chunks = 0;

  // --- options ---
  bool qk_l2norm = false;
  bool beta_sigmoid = false;
  bool gate_in_kernel = false;  // gated op only
  // Run only the kernels every supported GPU runs (mma.sync, as on sm_80), not the sm_90a
  // warpgroup-product ones, even where the device has them: for tests and comparisons.
  bool portable_kernels = false;

  // --- inputs ---
  const __nv_bfloat16* q = nullptr;      // [B,T,H,K]
  const __nv_bfloat16* k = nullptr;      // [B,T,H,K], same strides as q
  const __nv_bfloat16* v = nullptr;      // [B,T,H,V]
  TensorStrides qk_strides;              // q, k, dq, dk
  TensorStrides v_strides;               // v, o, d_o, dv
  const float* beta = nullptr;           // [B,T,H] fp32: beta, or its logits with beta_sigmoid
  const float* a = nullptr;              // gated only, [B,T,H] fp32: gate input, or the log decay g
  TensorStrides scalar_strides;          // beta, a, dbeta, da (no feature dim)
  const float* A_log = nullptr;          // [H] fp32, gate_in_kernel only
  const float* dt_bias = nullptr;        // [H] fp32, gate_in_kernel only
  const float* initial_state = nullptr;  // [N,H,K,V] fp32, optional

  // --- forward outputs ---
  __nv_bfloat16* o = nullptr;    // [B,T,H,V]
  float* final_state = nullptr;  // [N,H,K,V] fp32, optional

  // --- backward (inputs d_o, d_final_state; outputs the rest) ---
  const __nv_bfloat16* d_o = nullptr;    // [B,T,H,V]
  const float* d_final_state = nullptr;  // [N,H,K,V], optional
  __nv_bfloat16* dq = nullptr;           // gradients of the raw (un-normalised) q and k
  __nv_bfloat16* dk = nullptr;
  __nv_bfloat16* dv = nullptr;
  float* dbeta = nullptr;            // gradient of the beta input (the logits with beta_sigmoid)
  float* da = nullptr;               // gated only: gradient of a
  float* dA_log = nullptr;           // [H], gate_in_kernel only, optional
  float* ddt_bias = nullptr;         // [H], gate_in_kernel only, optional
  float* d_initial_state = nullptr;  // [N,H,K,V], optional

  // Only the rows of real tokens are written: with cu_seqlens[N] < T, the slack rows of o, dq,
  // dk, dv, dbeta and da keep whatever the caller put there (zero them if they are read).

  // --- the forward's per-chunk results, kept for the backward (optional) ---
  // *ChunkStatesBytes(params) bytes, 256-byte aligned: the bf16 state entering each chunk and
  // the chunks' new values U - W S (bf16 [B*T, H, V]), which the forward's state pass writes,
  // and W = T diag(beta gamma) K (bf16 [B*T, H, K]) and the 64 x 64 chunk matrices M (bf16) and
  // T with KD packed in one (fp32), which its per-chunk preparation writes. Set for the forward, it
  // writes them there instead of into its workspace; set for the backward, given the same inputs,
  // the backward reads them instead of running those two kernels again. Null: the backward
  // recomputes them (less memory kept between the passes: K V / 32 + 2 V + 2 K + 384 bytes per
  // token and head, 1.8 times q, k and v at K = V = 128). The workspace sizes depend on whether it
  // is set.
  void* chunk_states = nullptr;

  // Device scratch of at least *WorkspaceBytes(params, backward) bytes, 256-byte aligned.
  void* workspace = nullptr;
};

}  // namespace flame::kernels
