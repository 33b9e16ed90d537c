// o (forward) and dv (backward) of chunk_simple_gla (the per-head gate; chunk_gla's are in
// chunk_gated_channel.cuh). Device code; included through chunk_gated.cuh.
//
// One block per (chunk, head, 64-wide V slice), all operands staged at once with asynchronous
// copies and every product accumulated in registers:
//   forward:  o[:, v]  = diag(scale 2^G) (Q h_c[:, v]) + P V[:, v],
//             P_ij = scale (q_i . k_j) 2^(G_i - G_j) for j <= i
//   backward: dv[:, v] = diag(2^(G_last - G)) (K dh_c[:, v]) + P' dO[:, v],
//             P'_ji = scale (k_j . q_i) 2^(G_i - G_j) for i >= j
// Both are "rows operand X (q or k) against columns operand Y (k or q)", so one kernel serves
// both. A head gate is one scalar per token, so the decays factor out of the products as row
// and column scalings: no decayed copy of q or k is made. The scores are recomputed per V slice
// (2 x 64 x 64 x K FLOPs, small beside the slice's own products) so that the slices run as
// separate blocks.
// Why not the earlier layout (one block per chunk, loops over the slices with a load and a
// barrier before each product, C in shared memory): at (4,2048,16,128) it took 199 us per call,
// mostly waiting on its synchronous loads with two blocks per SM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// Dynamic shared memory: G (64 fp32), then bf16 tiles: X and Y (K/64 slices each), the K/64
// state tiles of the V slice, the right-hand tile (v or d_o), the masked scores.
// K = 128: 8 tiles, 73.984 KB (3 blocks per SM); K = 256: 14 tiles (1 block per SM).
inline size_t HeadOutputSmemBytes(int k_dim) {
  const size_t tiles = 3 * (k_dim / kBK) + 2;
  return kBT * sizeof(float) + tiles * kTileElems * sizeof(bf16);
}

template <bool kGradV>
__global__ void __launch_bounds__(kThreads) HeadOutputKernel(ChunkGatedParams p,
                                                             const bf16* states) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* G = reinterpret_cast<float*>(smem_raw);
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw + kBT * sizeof(float));
  const int slices = p.k_dim / kBK;
  bf16* x = tiles;                       // q (forward) or k (backward); slice kk at kk * kTileElems
  bf16* y = x + slices * kTileElems;     // k (forward) or q (backward)
  bf16* st = y + slices * kTileElems;    // h_c or dh_c, rows kk * 64 .. of this V slice
  bf16* rhs = st + slices * kTileElems;  // v or d_o
  bf16* scores = rhs + kTileElems;       // P (forward) or P' (backward), bf16
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y, v0 = blockIdx.z * kBK;

  const bf16* x_src = kGradV ? p.k : p.q;
  const bf16* y_src = kGradV ? p.q : p.k;
  for (int kk = 0; kk < slices; ++kk) {
    AsyncRows(x + kk * kTileElems, x_src, p.qk_strides, c, h, kk * kBK);
    AsyncRows(y + kk * kTileElems, y_src, p.qk_strides, c, h, kk * kBK);
    AsyncStateTile(st + kk * kTileElems, states, p, c.global, h, kk * kBK, v0);
  }
  AsyncRows(rhs, kGradV ? p.d_o : p.v, p.v_strides, c, h, v0);
  __pipeline_commit();
  LoadHeadGate(G, p, c, h);  // overlaps the copies; synchronises
  __pipeline_wait_prior(0);
  __syncthreads();

  // Scores S = X Y^T, masked and decayed in registers, stored as the bf16 operand.
  tile::Acc64 acc;
  acc.Zero();
  for (int kk = 0; kk < slices; ++kk) {
    tile::MmaBf16Acc64<true, false>(acc, kBK, x + kk * kTileElems, kLdBf16, y + kk * kTileElems,
                                    kLdBf16);
  }
  const float scale = p.scale;
  acc.Transform([&](int r, int col, float v) {
    // forward: row i = r, column j = col, kept for j <= i; backward: row j = r, column i = col,
    // kept for i >= j. The exponent is G_i - G_j <= 0 in both.
    const bool keep = kGradV ? col >= r : col <= r;
    const float gap = kGradV ? G[col] - G[r] : G[r] - G[col];
    return keep ? v * scale * exp2f(gap) : 0.0f;
  });
  acc.StoreBf16(scores, kLdBf16);

  // Inter-chunk part X S_c, its rows decayed, then the intra-chunk part.
  acc.Zero();
  for (int kk = 0; kk < slices; ++kk) {
    tile::MmaBf16Acc64<true, true>(acc, kBK, x + kk * kTileElems, kLdBf16, st + kk * kTileElems,
                                   kLdBf16);
  }
  const float g_last = G[kBT - 1];
  acc.Transform([&](int r, int, float v) {
    return v * (kGradV ? exp2f(g_last - G[r]) : scale * exp2f(G[r]));
  });
  __syncthreads();  // every warp's scores are stored; X is no longer read
  tile::MmaBf16Acc64<true, true>(acc, kBT, scores, kLdBf16, rhs, kLdBf16);
  StoreAccRows(acc, x, kGradV ? p.dv : p.o, p.v_strides, c, h, v0);
}

}  // namespace flame::kernels::gated_chunk
