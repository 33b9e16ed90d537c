// The backward's row gradients of the chunked delta rule (formulas in chunk_delta_steps.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Per (chunk, head): the gradients of the normalised q and k of every row, with
// dMD = dM * D (lower) and dAb = diag(beta) dA * D (strictly lower):
//   dq = scale diag(gamma) SdO + dMD K
//   dk = diag(exp(G_L - G)) dKd + diag(beta gamma) dX + dMD^T Q + (dAb + dAb^T) K
// written over SdO and dKd with the l2norm (FinishRowsKernel's input), else to dq and dk in
// bf16; and per row, with P = dMD * (Q K^T), Qm = dAb * (K K^T),
//   dG_i = scale gamma_i q_i.SdO_i - exp(G_L-G_i) k_i.dKd_i + beta_i gamma_i k_i.dX_i
//          + rowsum_i(P + Qm) - colsum_i(P + Qm)   [last row: + gamma_L <S, dS'> + sum_m
//          exp(G_L-G_m) k_m.dKd_m, the decay of the carried state and of every key]
//   dbeta_i = gamma_i k_i.dX_i + sum_{j<i} dA_ij D_ij k_i.k_j + v_i.dY_i (WYBackward's), through
//             the sigmoid when beta comes as logits
// P and Qm take Q K^T * D and K K^T * D from the chunk's M and KD (ChunkPrepare's), so the only
// products are those of the gradients, three per K slice (the symmetric dAb + dAb^T takes the
// two of dAb in one), each an fp32 x bf16 product of a TF32 matrix (dMD, dMD^T, dAb + dAb^T:
// row-major tiles, dMD's transpose written beside it) and the q or k tile as copied (cp.async,
// no widened copy). dX is read straight into the row loop. Shared memory: the three matrices,
// the q and k tiles and the dq and dk accumulators, two blocks per multiprocessor. Each K
// slice's tiles arrive together: one wait on memory per slice, not one per tile.
__global__ void __launch_bounds__(kThreads, 2) RowGradsKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  float* dmd = reinterpret_cast<float*>(smem4);  // the three matrices: leading dimension kLdT
  float* dmd_t = dmd + kBT * kLdT;
  float* dab = dmd_t + kBT * kLdT;
  float* dq = dab + kBT * kLdT;  // the accumulators: kLd
  float* dk = dq + kTile;
  float* G = dk + kTile;
  float* beta = G + kBT;
  float* q_sdo = beta + kBT;  // per-row dot products over K
  float* k_dkd = q_sdo + kBT;
  float* k_dx = k_dkd + kBT;
  bf16* q = reinterpret_cast<bf16*>(k_dx + kBT);  // the slice's rows: kLdBf16
  bf16* k = q + kBf16Tile;
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim;
  const int chunk = blockIdx.x, h = blockIdx.y;
  const Chunk c = LocateChunk(p, chunk);
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  IssueMat<kLdT>(dmd, b.s.dM + Mat(p, chunk, h));
  IssueMat<kLdT>(dab, b.s.dA + Mat(p, chunk, h));
  __pipeline_commit();
  if (threadIdx.x < kBT) q_sdo[threadIdx.x] = k_dkd[threadIdx.x] = k_dx[threadIdx.x] = 0.0f;
  __pipeline_wait_prior(0);
  __syncthreads();
  {
    // dMD and its transpose; dab becomes dAb + dAb^T: the thread of a lower element writes it
    // and its mirror (dA is strictly lower; no thread reads an element above the diagonal here).
    const int j = threadIdx.x % kBT;  // a fixed column per thread
#pragma unroll 4
    for (int i = threadIdx.x / kBT; i < kBT; i += kThreads / kBT) {
      const float D = j <= i ? __expf(G[i] - G[j]) : 0.0f;
      const float m = tile::RoundTf32(dmd[i * kLdT + j] * D);
      dmd[i * kLdT + j] = m;
      dmd_t[j * kLdT + i] = m;
      if (j < i) {
        const float x = tile::RoundTf32(dab[i * kLdT + j] * beta[i] * D);
        dab[i * kLdT + j] = x;
        dab[j * kLdT + i] = x;
      } else if (j == i) {
        dab[i * kLdT + i] = 0.0f;
      }
    }
  }
  const float G_last = G[c.rows - 1];
  // Four threads per row, 16 columns each, for the row dot products.
  const int row = threadIdx.x / 4, col0 = threadIdx.x % 4 * 16;
  const int64_t tok_stride = int64_t{p.heads} * K;
  const TokTilePieces row_pieces(tok_stride);
  for (int k0 = 0; k0 < K; k0 += kBT) {
    // SdO and dKd are accumulators (fp32, not operands), q and k the bf16 rows, all copied as
    // they are. Their earlier readers are behind the barrier ending the previous slice.
    IssueTokF32<kLd>(dq, TokPtr(b.s.SdO, p, c, 0, h, K) + k0, tok_stride, c.rows);
    IssueTokF32<kLd>(dk, TokPtr(b.s.dKd, p, c, 0, h, K) + k0, tok_stride, c.rows);
    row_pieces.Issue(q, b.s.qn + Tok(p, c.row, h, K) + k0, c.rows, 1);
    row_pieces.Issue(k, b.s.kn + Tok(p, c.row, h, K) + k0, c.rows, 1);
    __pipeline_commit();
    float dx[16] = {};
    if (row < c.rows) {
      const float4* src =
          reinterpret_cast<const float4*>(TokPtr(b.s.dX, p, c, row, h, K) + k0 + col0);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float4 v = src[t];
        dx[4 * t] = v.x, dx[4 * t + 1] = v.y, dx[4 * t + 2] = v.z, dx[4 * t + 3] = v.w;
      }
    }
    __pipeline_wait_prior(0);
    __syncthreads();
    float dots[3] = {0.0f, 0.0f, 0.0f};
    const float gamma = expf(G[row]), kd = expf(G_last - G[row]);
#pragma unroll
    for (int t = 0; t < 16; t += 2) {
      const int e = row * kLd + col0 + t, eb = row * kLdBf16 + col0 + t;
      const float2 qv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(q + eb));
      const float2 kv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(k + eb));
      dots[0] += qv.x * dq[e] + qv.y * dq[e + 1];
      dots[1] += kv.x * dk[e] + kv.y * dk[e + 1];
      dots[2] += kv.x * dx[t] + kv.y * dx[t + 1];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        dq[e + u] *= p.scale * gamma;
        dk[e + u] = kd * dk[e + u] + beta[row] * gamma * dx[t + u];
      }
    }
#pragma unroll
    for (int t = 0; t < 3; ++t) {
      dots[t] += __shfl_xor_sync(0xffffffffu, dots[t], 1);
      dots[t] += __shfl_xor_sync(0xffffffffu, dots[t], 2);
    }
    if (threadIdx.x % 4 == 0) q_sdo[row] += dots[0], k_dkd[row] += dots[1], k_dx[row] += dots[2];
    __syncthreads();
    {
      // Each warp reads and writes only its own tiles of dq and dk (Acc64), so the products
      // accumulate in registers between one load and one store.
      Acc acc;
      acc.Load(dq, kLd);
      tile::MmaTf32Bf16Acc64(acc, kBT, dmd, kLdT, k, kLdBf16);
      acc.Store(dq, kLd);
      acc.Load(dk, kLd);
      tile::MmaTf32Bf16Acc64(acc, kBT, dmd_t, kLdT, q, kLdBf16);
      tile::MmaTf32Bf16Acc64(acc, kBT, dab, kLdT, k, kLdBf16);
      acc.Store(dk, kLd);
    }
    __syncthreads();
    if (p.qk_l2norm) {  // FinishRowsKernel takes them through the l2norm's backward
      StoreTok(b.s.SdO, dq, p, c, h, K, k0);
      StoreTok(b.s.dKd, dk, p, c, h, K, k0);
    } else {  // they are dq and dk
      StoreInBf16(p.dq, dq, p.qk_strides, c, h, k0);
      StoreInBf16(p.dk, dk, p.qk_strides, c, h, k0);
    }
    __syncthreads();
  }
  // P = dM * M and Qm = dA * diag(beta) KD (strictly lower: the diagonal cancels in the sums
  // below) over the dq and dk tiles, the beta terms dA * KD over dmd. dmd and dab hold dM * D and
  // the symmetric diag(beta) dA * D, rounded for the products; these take the chunk matrices as
  // stored.
  float* QK = dq;
  float* KK = dk;
  const int64_t mat = Mat(p, chunk, h);
  const float *dM = b.s.dM + mat, *M = b.s.M + mat, *dA = b.s.dA + mat, *KD = b.s.KD + mat;
  ForBlockItems<kThreads, kBT * kBT>([&](int e) {
    const int i = e / kBT, j = e % kBT, x = i * kLd + j;
    const bool lower = j < i;
    const float dA_kd = lower ? dA[e] * KD[e] : 0.0f;
    QK[x] = lower ? dM[e] * M[e] : 0.0f;
    KK[x] = beta[i] * dA_kd;
    dmd[i * kLdT + j] = dA_kd;
  });
  __syncthreads();
  // Four threads per row: the row and column sums, and for the last row the decay of every key.
  {
    const int i = threadIdx.x / 4, part = threadIdx.x % 4;
    float sums = 0.0f, db = 0.0f, keys = 0.0f;
    if (i < c.rows) {
      for (int j = part; j < kBT; j += 4) {
        sums += QK[i * kLd + j] + KK[i * kLd + j] - QK[j * kLd + i] - KK[j * kLd + i];
        db += dmd[i * kLdT + j];
      }
      if (i == c.rows - 1) {
        for (int m = part; m < c.rows; m += 4) keys += expf(G_last - G[m]) * k_dkd[m];
      }
    }
    for (int off = 1; off < 4; off *= 2) {
      sums += __shfl_xor_sync(0xffffffffu, sums, off);
      db += __shfl_xor_sync(0xffffffffu, db, off);
      keys += __shfl_xor_sync(0xffffffffu, keys, off);
    }
    if (i < c.rows && part == 0) {
      const float gamma = expf(G[i]);
      float dG = p.scale * gamma * q_sdo[i] - expf(G_last - G[i]) * k_dkd[i] +
                 beta[i] * gamma * k_dx[i] + sums;
      if (i == c.rows - 1) {
        const float* dots = b.s.state_dots + (int64_t{chunk} * p.heads + h) * kMaxKSlices;
        float state_dot = 0.0f;
        for (int k = 0; k < p.k_dim / kBT; ++k) state_dot += dots[k];
        dG += gamma * state_dot + keys;
      }
      const int64_t ri = (c.row + i) * p.heads + h;
      b.s.dG[ri] = dG;
      const float dbeta = gamma * k_dx[i] + db + b.s.vdy[ri];
      p.dbeta[In(p.scalar_strides, c.batch, c.t0 + i, h)] =
          p.beta_sigmoid ? dbeta * beta[i] * (1.0f - beta[i]) : dbeta;
    }
  }
}

inline size_t RowGradsSmem() {
  return (3 * kBT * kLdT + 2 * kTile + 5 * kBT) * sizeof(float) + 2 * kBf16Tile * sizeof(bf16);
}

}  // namespace flame::kernels::delta_chunk::tiles
