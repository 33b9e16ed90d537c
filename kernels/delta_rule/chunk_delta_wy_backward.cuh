// The backward through the WY representation of the chunked delta rule (formulas in
// chunk_delta_steps.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Per (chunk, head), through W = T X and U = T Y (X = diag(beta gamma) K, Y = diag(beta) V):
//   dT = tril(dW X^T + dUt Y^T);  dX = T^T dW;  dY = T^T dUt;  dA = strict_tril(-T^T dT T^T).
// dT accumulates in registers; each product leaves through the tile its operand came from.
__global__ void __launch_bounds__(kThreads, 3) WYBackwardKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  float* T = reinterpret_cast<float*>(smem4);
  float* x = T + kTile;
  float* y = x + kTile;
  float* G = y + kTile;
  float* beta = G + kBT;
  const ChunkDeltaParams& p = b.p;
  const int chunk = blockIdx.x, h = blockIdx.y;
  const Chunk c = LocateChunk(p, chunk);
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  IssueMat<kLd>(T, b.s.T + Mat(p, chunk, h));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  Acc dT;
  dT.Zero();
  // dT += dZ Z^T and dZ' = T^T dZ for one 64-wide slice of (dW, X) or (dUt, Y) in x and y.
  const auto slice = [&](float* dst, int dim, int col0) {
    __syncthreads();
    Mma<false, true>(dT, x, y);
    Acc out;
    out.Zero();
    Mma<true, false>(out, T, x);
    __syncthreads();
    out.Store(y, kLd);
    __syncthreads();
    StoreTok(dst, y, p, c, h, dim, col0);
    __syncthreads();
  };
  // x by cp.async (dW and dUt are stored as TF32 values), y through registers (scaled) meanwhile.
  for (int k0 = 0; k0 < p.k_dim; k0 += kBT) {
    IssueTokF32<kLd>(x, TokPtr(b.s.dW, p, c, 0, h, p.k_dim) + k0, int64_t{p.heads} * p.k_dim,
                     c.rows);
    __pipeline_commit();
    LoadTok(y, b.s.kn, p, c, h, p.k_dim, k0, [&](int r) { return beta[r] * expf(G[r]); });
    __pipeline_wait_prior(0);
    slice(b.s.dX, p.k_dim, k0);
  }
  for (int v0 = 0; v0 < p.v_dim; v0 += kBT) {
    IssueTokF32<kLd>(x, TokPtr(b.s.dUt, p, c, 0, h, p.v_dim) + v0, int64_t{p.heads} * p.v_dim,
                     c.rows);
    __pipeline_commit();
    LoadIn(y, p.v, p.v_strides, c, h, v0, [&](int r) { return beta[r]; });
    __pipeline_wait_prior(0);
    slice(b.s.dY, p.v_dim, v0);
  }
  dT.Store(x, kLd);
  __syncthreads();
  for (int e = threadIdx.x; e < kBT * kBT; e += kThreads) {
    const int i = e / kBT, j = e % kBT;
    x[i * kLd + j] = i < c.rows && j <= i ? tile::RoundTf32(x[i * kLd + j]) : 0.0f;
  }
  __syncthreads();
  Acc z;  // Z = dT T^T
  z.Zero();
  Mma<false, true>(z, x, T);
  z.RoundToTf32();
  z.Store(y, kLd);
  __syncthreads();
  Acc tz;  // T^T Z
  tz.Zero();
  Mma<true, false>(tz, T, y);
  tz.Store(x, kLd);
  __syncthreads();
  float* dA = b.s.dA + Mat(p, chunk, h);
  for (int e = threadIdx.x; e < kBT * kBT; e += kThreads) {
    const int i = e / kBT, j = e % kBT;
    dA[e] = i < c.rows && j < i ? -x[i * kLd + j] : 0.0f;
  }
}

inline size_t WYBackwardSmem() { return (3 * kTile + 2 * kBT) * sizeof(float); }

}  // namespace flame::kernels::delta_chunk::tiles
