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
//   dT = tril(dW X^T + dUt Y^T);  dX = T^T dW;  dY = T^T dUt;  dA = strict_tril(-T^T dT T^T),
// and from dY the value and beta gradients' parts: dv = diag(beta) dY (bf16, to the output) and
// per row v . dY (RowGrads adds it to dbeta). Each 64-wide slice of (dW, K), then of (dUt, V),
// arrives by cp.async, all bf16 (dW and dUt as RowTerms and the backward state pass store them;
// the rows of k and v, exact); T^T times the slice is an fp32 x bf16 product, T read transposed,
// and leaves from the registers: dX to the scratch, dY as dv (its v . dY against the v tile as
// copied). dT's transpose accumulates in registers as bf16 products,
//   dT^T = diag(beta) (diag(gamma) K dW^T + V dUt^T)
// (the gamma scaling applied between the K and the V slices), and is stored transposed once.
// Why: the earlier form widened the k and v rows into fp32 tiles through registers (a wait on
// memory per slice) and staged every output through a third tile: 1107 us per call at
// (1,8192,96,128); with dW and dUt in fp32 (TF32 products) it took 802 us. dY went through an
// fp32 scratch tensor to a kernel of its own (267 us at that shape).
__global__ void __launch_bounds__(kThreads, 3) WYBackwardKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  // T and dT at leading dimension kLd (T read transposed by the slices' paired loads and as
  // ldmatrix rows in dT T^T; dT written transposed and read by ldmatrix: conflict-free at 4 mod
  // 32), Z at kLdT (the row-major B of T^T Z).
  float* T = reinterpret_cast<float*>(smem4);
  float* x = T + kTile;  // dT
  float* y = x + kTile;  // Z
  float* G = y + kBT * kLdT;
  float* beta = G + kBT;
  float* vdy_parts = beta + kBT;  // per row, the four warps' parts of v . dY
  bf16* grad = reinterpret_cast<bf16*>(vdy_parts + 4 * kBT);  // the slice of dW or dUt
  bf16* rows = grad + kBf16Tile;                              // the slice's k or v rows
  const ChunkDeltaParams& p = b.p;
  const int chunk = blockIdx.x, h = blockIdx.y;
  const Chunk c = LocateChunk(p, chunk);
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  IssueMat<kLd>(T, b.s.T + Mat(p, chunk, h));
  __pipeline_commit();
  const TokTilePieces k_pieces(int64_t{p.heads} * p.k_dim);  // of k and dW
  const TokTilePieces v_pieces(p.v_strides.token);
  const TokTilePieces dut_pieces(int64_t{p.heads} * p.v_dim);
  const bf16* k_chunk = b.s.kn + Tok(p, c.row, h, p.k_dim);
  const bf16* dw_chunk = b.s.dW + Tok(p, c.row, h, p.k_dim);
  const bf16* v_chunk = p.v + In(p.v_strides, c.batch, c.t0, h);
  const bf16* dut_chunk = b.s.dUt + Tok(p, c.row, h, p.v_dim);
  Acc dTt;  // dT^T
  dTt.Zero();
  // One slice, its tiles issued: dT^T += rows dZ^T; returns T^T dZ. The caller stores it and
  // then frees the tiles with a barrier.
  const auto slice = [&]() {
    __pipeline_wait_prior(0);
    __syncthreads();  // the slice (and T, G, beta) are in
    tile::MmaBf16Acc64<true, false>(dTt, kBT, rows, kLdBf16, grad, kLdBf16);
    Acc out;
    out.Zero();
    tile::MmaTf32Bf16Acc64<false>(out, kBT, T, kLd, grad, kLdBf16);
    return out;
  };
  for (int k0 = 0; k0 < p.k_dim; k0 += kBT) {
    k_pieces.Issue(grad, dw_chunk + k0, c.rows, 1);
    k_pieces.Issue(rows, k_chunk + k0, c.rows, 1);
    __pipeline_commit();
    const Acc dx = slice();
    StoreAccRows(dx, b.s.dX + Tok(p, c.row, h, p.k_dim) + k0, int64_t{p.heads} * p.k_dim, c.rows);
    __syncthreads();  // grad and rows are free for the next slice
  }
  dTt.Transform([&](int r, int, float v) { return v * expf(G[r]); });
  float vdy[2][2] = {};  // the lane's parts of v . dY: [accumulator part][row half]
  for (int v0 = 0; v0 < p.v_dim; v0 += kBT) {
    dut_pieces.Issue(grad, dut_chunk + v0, c.rows, 1);
    v_pieces.Issue(rows, v_chunk + v0, c.rows, 1);
    __pipeline_commit();
    Acc dy = slice();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int r = Acc::ElementRow(i, e), col = Acc::ElementCol(e);
        vdy[i][e / 2 % 2] += dy.part[i].x[e] * __bfloat162float(rows[r * kLdBf16 + col]);
      }
    }
    dy.Transform([&](int r, int, float v) { return beta[r] * v; });
    StoreAccRows(dy, p.dv + In(p.v_strides, c.batch, c.t0, h) + v0, p.v_strides.token, c.rows);
    __syncthreads();  // grad and rows are free for the next slice
  }
  // v . dY: the four lanes of a row by shuffles, then the four warps of a row in shared memory.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float v = vdy[i][half];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      if (threadIdx.x % 4 == 0) {
        vdy_parts[Acc::ElementRow(i, 2 * half) * 4 + threadIdx.x / 32 % 4] = v;
      }
    }
  }
  // dT = tril(dT^T's transpose) into x (TF32: an operand), element (j, i) of dT^T to x[i][j].
  dTt.Transform([&](int r, int col, float v) {
    x[col * kLd + r] = col < c.rows && r <= col ? tile::RoundTf32(beta[r] * v) : 0.0f;
    return v;
  });
  __syncthreads();
  if (threadIdx.x < c.rows) {
    const float* parts = vdy_parts + threadIdx.x * 4;
    b.s.vdy[Tok(p, c.row + threadIdx.x, h, 1)] = parts[0] + parts[1] + parts[2] + parts[3];
  }
  Acc z;  // Z = dT T^T
  z.Zero();
  tile::MmaTf32Acc64<true, false>(z, kBT, x, kLd, T, kLd);
  z.RoundToTf32();
  z.Store(y, kLdT);
  __syncthreads();
  Acc tz;  // T^T Z
  tz.Zero();
  tile::MmaTf32Acc64<false, true>(tz, kBT, T, kLd, y, kLdT);
  float* dA = b.s.dA + Mat(p, chunk, h);
  tz.Transform([&](int r, int col, float v) {
    dA[r * kBT + col] = r < c.rows && col < r ? -v : 0.0f;
    return v;
  });
}

inline size_t WYBackwardSmem() {
  return (2 * kTile + kBT * kLdT + 6 * kBT) * sizeof(float) + 2 * kBf16Tile * sizeof(bf16);
}

}  // namespace flame::kernels::delta_chunk::tiles
