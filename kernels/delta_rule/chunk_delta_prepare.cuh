// The per-chunk preparation of the chunked delta rule (formulas in chunk_delta_steps.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Per chunk: QK = Q K^T and KK = K K^T over K, in registers: bf16 products of the bf16 rows
// (exact, summed in fp32) straight from their asynchronously copied tiles; M = tril(QK * D)
// goes to the scratch from the registers (and, for the backward's WYBackward, KD =
// strict_tril(KK * D), transposed, as the strictly upper part of the packed matrix TKD: by the
// forward where the caller keeps it, else by the backward's recompute); A = strict_tril(diag(beta)
// KK * D); T = (I + A)^-1 (TKD's lower part); W = T diag(beta gamma) K (bf16, the state
// passes' operand) and U = T diag(beta) V (bf16 too), each slice a product of the scaled T as two
// bf16 tiles (StoreSplitBf16Pair's hi and lo: 16 bits of mantissa) and the rows' tile as copied.
// Shared memory: two fp32 tiles (A, then the scaled T in bf16; T), G and beta, and the rows' bf16
// tiles (k, and q where V's slices land once q is used), 73 KB at K = V = 128 (three blocks per
// SM). Why: the earlier form loaded q and k through registers into fp32 tiles, one 64-wide slice
// per step with two barriers, for TF32 products (four operand loads per product where bf16 needs
// one), and staged M and U through a third tile: 620 us per call at (2,16384,16,128).
__global__ void __launch_bounds__(kThreads, 3) ChunkPrepareKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  float* y = reinterpret_cast<float*>(smem4);  // A (leading dimension kLd), then T diag(f) in bf16
  float* T = y + kBT * kLdT;
  float* G = T + kTile;
  float* beta = G + kBT;
  bf16* rows = reinterpret_cast<bf16*>(beta + kBT);
  const ChunkDeltaParams& p = b.p;
  const int chunk = blockIdx.x, h = blockIdx.y, nk = p.k_dim / kBT;
  const Chunk c = LocateChunk(p, chunk);
  bf16* k_tiles = rows;
  bf16* q_tiles = rows + nk * kBf16Tile;
  bf16* v_tiles = q_tiles;
  {
    const TokTilePieces pieces(int64_t{p.heads} * p.k_dim);
    pieces.Issue(q_tiles, b.s.qn + Tok(p, c.row, h, p.k_dim), c.rows, nk);
    pieces.Issue(k_tiles, b.s.kn + Tok(p, c.row, h, p.k_dim), c.rows, nk);
  }
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  {
    Acc qk, kk;
    qk.Zero(), kk.Zero();
    for (int j = 0; j < nk; ++j) {
      const bf16* q = q_tiles + j * kBf16Tile;
      const bf16* k = k_tiles + j * kBf16Tile;
      tile::MmaBf16Acc64<true, false>(qk, kBT, q, kLdBf16, k, kLdBf16);
      tile::MmaBf16Acc64<true, false>(kk, kBT, k, kLdBf16, k, kLdBf16);
    }
    // The lane's elements in adjacent pairs (x[e], x[e + 1]: columns col, col + 1 of one row).
    bf16* M = b.s.M + Mat(p, chunk, h);
    float* TKD = b.s.TKD != nullptr ? b.s.TKD + Mat(p, chunk, h) : nullptr;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        const int r = Acc::ElementRow(i, e), col = Acc::ElementCol(e);
        const float* x_qk = qk.part[i].x + e;
        const float* x_kk = kk.part[i].x + e;
        // (Ungated, G = 0: the decays are 1.)
        const float d0 = r < c.rows && col <= r ? (b.gated ? __expf(G[r] - G[col]) : 1.0f) : 0.0f;
        const float d1 =
            r < c.rows && col + 1 <= r ? (b.gated ? __expf(G[r] - G[col + 1]) : 1.0f) : 0.0f;
        // M in bf16: the output's and LocalValueGrads' bf16 products read it (fla's output
        // kernel takes its score matrix in bf16 too), at half the bytes of fp32.
        const __nv_bfloat162 m = __floats2bfloat162_rn(x_qk[0] * d0, x_qk[1] * d1);
        const float2 kd =
            make_float2(col < r ? x_kk[0] * d0 : 0.0f, col + 1 < r ? x_kk[1] * d1 : 0.0f);
        *reinterpret_cast<__nv_bfloat162*>(M + r * kBT + col) = m;
        *reinterpret_cast<float2*>(y + r * kLd + col) = make_float2(beta[r] * kd.x, beta[r] * kd.y);
        // KD^T above the diagonal: a store instruction fills four 32-byte pieces of rows.
        if (TKD != nullptr && col < r) {
          TKD[col * kBT + r] = kd.x;
          if (col + 1 < r) TKD[(col + 1) * kBT + r] = kd.y;
        }
      }
    }
  }
  __syncthreads();  // A is in y; no warp reads the q tiles any more
  {
    const TokTilePieces v_pieces(p.v_strides.token);
    const bf16* v_chunk = p.v + In(p.v_strides, c.batch, c.t0, h);
    for (int j = 0; j < p.v_dim / kBT; ++j) {
      v_pieces.Issue(v_tiles + j * kBf16Tile, v_chunk + j * kBT, c.rows, 1);
    }
    __pipeline_commit();
  }
  InvertUnitLower(T, y);
  if (b.s.TKD != nullptr) StoreLowerT(b.s.TKD + Mat(p, chunk, h), T);  // for WYBackward
  // T diag(f) into y's space as hi + lo bf16 tiles (its earlier readers are behind the last
  // barrier), each thread the columns m, m + 1 with their factors f(m), then dst = T diag(f) X
  // for each 64-wide slice of the rows' tiles x: the product overwrites its own slice in bf16 once
  // every warp has read it, and the slice leaves in 16-byte row pieces. (Stored from the
  // registers, two columns per store, the kernel's outputs took most of its L1 requests.) The
  // split operand's products read A by ldmatrix; as a TF32 tile A took two 8-byte loads per
  // fragment and B's bf16 pairs were widened to TF32, about twice the instructions per product.
  bf16* t_hi = reinterpret_cast<bf16*>(y);
  bf16* t_lo = t_hi + kBf16Tile;
  static_assert(2 * kBf16Tile * 2 <= kBT * kLdT * 4, "T diag(f)'s two bf16 tiles fit in y");
  const int m = threadIdx.x % 32 * 2;
  const auto scale_t = [&](float f0, float f1) {
#pragma unroll
    for (int i = threadIdx.x / 32; i < kBT; i += kWarps) {
      const float2 t = *reinterpret_cast<const float2*>(T + i * kLd + m);
      tile::StoreSplitBf16Pair(t_hi + i * kLdBf16 + m, t_lo + i * kLdBf16 + m, t.x * f0, t.y * f1);
    }
  };
  // T is lower triangular: row tile I of a product with it sums k < 16 (I + 1) only.
  tile::PartK lower;
#pragma unroll
  for (int i = 0; i < 2; ++i) lower.begin[i] = 0, lower.end[i] = Acc::Row(i) + 16;
  const auto store_t_times = [&](bf16* x, int slices, bf16* dst, int64_t ld) {
    for (int j = 0; j < slices; ++j) {
      bf16* slice = x + j * kBf16Tile;
      Acc acc;
      acc.Zero();
      tile::MmaSplitBf16Acc64<true, true>(acc, lower, t_hi, kLdBf16, kBf16Tile, slice, kLdBf16);
      __syncthreads();  // every warp has read the slice
      acc.StoreBf16(slice, kLdBf16);
      __syncthreads();
      StoreTokTile(dst + j * kBT, ld, slice, c.rows);
    }
  };
  scale_t(beta[m] * __expf(G[m]), beta[m + 1] * __expf(G[m + 1]));
  __syncthreads();
  store_t_times(k_tiles, nk, b.s.W + Tok(p, c.row, h, p.k_dim), int64_t{p.heads} * p.k_dim);
  __pipeline_wait_prior(0);  // V
  __syncthreads();           // V is in; y's readers are done
  scale_t(beta[m], beta[m + 1]);
  __syncthreads();
  store_t_times(v_tiles, p.v_dim / kBT, b.s.U + Tok(p, c.row, h, p.v_dim),
                int64_t{p.heads} * p.v_dim);
}

// The rows' tiles: k, then q, where V's slices land (past the end of q where V > K).
inline size_t ChunkPrepareSmem(int k_dim, int v_dim) {
  const int nk = k_dim / kBT, row_tiles = nk + (nk > v_dim / kBT ? nk : v_dim / kBT);
  return (kBT * kLdT + kTile + 2 * kBT) * sizeof(float) + row_tiles * kBf16Tile * 2;
}

}  // namespace flame::kernels::delta_chunk::tiles
