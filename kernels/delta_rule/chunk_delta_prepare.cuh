// The per-chunk preparation of the chunked delta rule (formulas in chunk_delta_steps.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Per chunk: QK = Q K^T and KK = K K^T over K (in registers); M = tril(QK * D) (stored);
// A = strict_tril(diag(beta) KK * D); T = (I + A)^-1 (stored); U = T diag(beta) V. Three fp32
// tiles of shared memory, and V's bf16 slices: G and beta are copied by cp.async while Q K^T and
// K K^T are formed, V's slices while T is.
__global__ void __launch_bounds__(kThreads, 3) ChunkPrepareKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  float* x = reinterpret_cast<float*>(smem4);
  float* y = x + kTile;
  float* T = y + kTile;
  float* G = T + kTile;
  float* beta = G + kBT;
  bf16* v_slices = reinterpret_cast<bf16*>(beta + kBT);
  const ChunkDeltaParams& p = b.p;
  const int chunk = blockIdx.x, h = blockIdx.y;
  const Chunk c = LocateChunk(p, chunk);
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  __pipeline_commit();
  {
    Acc qk, kk;
    qk.Zero(), kk.Zero();
    for (int k0 = 0; k0 < p.k_dim; k0 += kBT) {
      LoadTokPair(x, b.s.qn, y, b.s.kn, p, c, h, p.k_dim, k0);
      __syncthreads();
      Mma<false, true>(qk, x, y);
      Mma<false, true>(kk, y, y);
      __syncthreads();
    }
    qk.Store(x, kLd);
    kk.Store(y, kLd);
  }
  {
    const TokTilePieces v_pieces(p.v_strides.token);
    const bf16* v_chunk = p.v + In(p.v_strides, c.batch, c.t0, h);
    for (int j = 0; j < p.v_dim / kBT; ++j) {
      v_pieces.Issue(v_slices + j * kBf16Tile, v_chunk + j * kBT, c.rows, 1);
    }
    __pipeline_commit();
  }
  __pipeline_wait_prior(1);  // G and beta
  __syncthreads();
  float* M = b.s.M + Mat(p, chunk, h);
  for (int e = threadIdx.x; e < kBT * kBT; e += kThreads) {
    const int i = e / kBT, j = e % kBT;
    const float D = i < c.rows && j <= i ? __expf(G[i] - G[j]) : 0.0f;
    M[e] = tile::RoundTf32(x[i * kLd + j] * D);  // an operand as it is in StateBackward
    y[i * kLd + j] = j < i ? beta[i] * y[i * kLd + j] * D : 0.0f;  // A
  }
  __syncthreads();
  InvertUnitLower(T, y);
  StoreMat(b.s.T + Mat(p, chunk, h), T);
  // U, one 64-wide slice at a time, through x to the scratch rows. (W = T diag(beta gamma) K is
  // not stored: the state passes form its products from T and the keys.)
  __pipeline_wait_prior(0);  // V
  __syncthreads();
  for (int v0 = 0; v0 < p.v_dim; v0 += kBT) {
    const bf16* v = v_slices + v0 / kBT * kBf16Tile;
    for (int idx = threadIdx.x; idx < kBT * kBT / 2; idx += kThreads) {
      const int r = idx / (kBT / 2), c2 = idx % (kBT / 2) * 2;
      const float2 x2 =
          __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(v + r * kLdBf16 + c2));
      *reinterpret_cast<float2*>(y + r * kLd + c2) =
          make_float2(tile::RoundTf32(beta[r] * x2.x), tile::RoundTf32(beta[r] * x2.y));
    }
    __syncthreads();
    Acc u;
    u.Zero();
    Mma<false, false>(u, T, y);
    u.Store(x, kLd);  // x's readers (the last StoreTok) are behind the barrier above
    __syncthreads();
    StoreTok(b.s.U, x, p, c, h, p.v_dim, v0);
  }
}

inline size_t ChunkPrepareSmem(int v_dim) {
  return (3 * kTile + 2 * kBT) * sizeof(float) + v_dim / kBT * kBf16Tile * 2;
}

}  // namespace flame::kernels::delta_chunk::tiles
