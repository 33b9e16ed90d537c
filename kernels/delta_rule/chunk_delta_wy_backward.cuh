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
// Each 64-wide slice of (dW, K), then of (dUt, V), arrives by cp.async -- dW and dUt as stored
// (TF32 values), the rows of k and v as bf16 (exact) -- and leaves its dX or dY from the
// registers. dT's transpose accumulates in registers as bf16 x TF32 products,
//   dT^T = diag(beta) (diag(gamma) K dW^T + V dUt^T)
// (the gamma scaling applied between the K and the V slices), and is stored transposed once.
// Why: the earlier form widened the k and v rows into fp32 tiles through registers (a wait on
// memory per slice) and staged every output through a third tile: 1107 us per call at
// (1,8192,96,128).
__global__ void __launch_bounds__(kThreads, 3) WYBackwardKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  // Leading dimension kLdT throughout: T is read transposed as the A operand of the slices'
  // products, Z and the slices as row-major B operands (8 mod 32: conflict-free).
  float* T = reinterpret_cast<float*>(smem4);
  float* x = T + kBT * kLdT;  // dW or dUt slice, then dT
  float* y = x + kBT * kLdT;  // Z
  float* G = y + kBT * kLdT;
  float* beta = G + kBT;
  bf16* rows = reinterpret_cast<bf16*>(beta + kBT);  // the slice's k or v rows
  const ChunkDeltaParams& p = b.p;
  const int chunk = blockIdx.x, h = blockIdx.y;
  const Chunk c = LocateChunk(p, chunk);
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  IssueMat<kLdT>(T, b.s.T + Mat(p, chunk, h));
  __pipeline_commit();
  const TokTilePieces k_pieces(int64_t{p.heads} * p.k_dim);
  const TokTilePieces v_pieces(p.v_strides.token);
  const bf16* k_chunk = b.s.kn + Tok(p, c.row, h, p.k_dim);
  const bf16* v_chunk = p.v + In(p.v_strides, c.batch, c.t0, h);
  Acc dTt;  // dT^T
  dTt.Zero();
  // One slice: dT^T += rows dZ^T, and dZ' = T^T dZ to dst (a [R,H,dim] scratch tensor).
  const auto slice = [&](float* dst, int dim, int col0) {
    __pipeline_wait_prior(0);
    __syncthreads();  // the slice (and T, G, beta) are in
    tile::MmaBf16Tf32Acc64<true, false>(dTt, kBT, rows, kLdBf16, x, kLdT);
    Acc out;
    out.Zero();
    tile::MmaTf32Acc64<false, true>(out, kBT, T, kLdT, x, kLdT);
    StoreAccRows(out, dst + Tok(p, c.row, h, dim) + col0, int64_t{p.heads} * dim, c.rows);
    __syncthreads();  // x and rows are free for the next slice
  };
  for (int k0 = 0; k0 < p.k_dim; k0 += kBT) {
    IssueTokF32<kLdT>(x, TokPtr(b.s.dW, p, c, 0, h, p.k_dim) + k0, int64_t{p.heads} * p.k_dim,
                      c.rows);
    k_pieces.Issue(rows, k_chunk + k0, c.rows, 1);
    __pipeline_commit();
    slice(b.s.dX, p.k_dim, k0);
  }
  dTt.Transform([&](int r, int, float v) { return v * expf(G[r]); });
  for (int v0 = 0; v0 < p.v_dim; v0 += kBT) {
    IssueTokF32<kLdT>(x, TokPtr(b.s.dUt, p, c, 0, h, p.v_dim) + v0, int64_t{p.heads} * p.v_dim,
                      c.rows);
    v_pieces.Issue(rows, v_chunk + v0, c.rows, 1);
    __pipeline_commit();
    slice(b.s.dY, p.v_dim, v0);
  }
  // dT = tril(dT^T's transpose) into x (TF32: an operand), element (j, i) of dT^T to x[i][j].
  dTt.Transform([&](int r, int col, float v) {
    x[col * kLdT + r] = col < c.rows && r <= col ? tile::RoundTf32(beta[r] * v) : 0.0f;
    return v;
  });
  __syncthreads();
  Acc z;  // Z = dT T^T
  z.Zero();
  tile::MmaTf32Acc64<true, false>(z, kBT, x, kLdT, T, kLdT);
  z.RoundToTf32();
  z.Store(y, kLdT);
  __syncthreads();
  Acc tz;  // T^T Z
  tz.Zero();
  tile::MmaTf32Acc64<false, true>(tz, kBT, T, kLdT, y, kLdT);
  float* dA = b.s.dA + Mat(p, chunk, h);
  tz.Transform([&](int r, int col, float v) {
    dA[r * kBT + col] = r < c.rows && col < r ? -v : 0.0f;
    return v;
  });
}

inline size_t WYBackwardSmem() {
  return (3 * kBT * kLdT + 2 * kBT) * sizeof(float) + kBf16Tile * sizeof(bf16);
}

}  // namespace flame::kernels::delta_chunk::tiles
