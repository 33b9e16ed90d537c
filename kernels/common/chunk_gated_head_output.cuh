// o (forward) and dv (backward) of chunk_simple_gla (the per-head gate; chunk_gla's are in
// chunk_gated_channel.cuh). Device code; included through chunk_gated.cuh.
//
// One block per (chunk, head, 64-wide V slice), every product accumulated in registers:
//   forward:  o[:, v]  = diag(scale 2^G) (Q h_c[:, v]) + P V[:, v],
//             P_ij = scale (q_i . k_j) 2^(G_i - G_j) for j <= i
//   backward: dv[:, v] = diag(2^(G_last - G)) (K dh_c[:, v]) + P' dO[:, v],
//             P'_ji = scale (k_j . q_i) 2^(G_i - G_j) for i >= j
// Both are "rows operand X (q or k) against columns operand Y (k or q)", so one kernel serves
// both. A head gate is one scalar per token, so the decays factor out of the products as row
// and column scalings: no decayed copy of q or k is made. The scores are recomputed per V slice
// (2 x 64 x 64 x K FLOPs, small beside the slice's own products) so that the slices run as
// separate blocks.
// The K slices stream through two stages of shared memory (asynchronous copies of the next
// slice's X, Y and state tiles while this slice's are multiplied), both sums over K (the scores
// and X h_c) accumulating at once; so the block's shared memory does not grow with K.
// Why: with all K/64 slices resident, K = 256 took 14 tiles (129 KB, one block per SM) and
// 995 us per call at (8,4096,8,256). An earlier layout (one block per chunk, loops over the
// slices with a synchronous load and a barrier before each product, C in shared memory) took
// 199 us per call at (4,2048,16,128), waiting on its loads with two blocks per SM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// Dynamic shared memory: G (64 fp32), then bf16 tiles: the stages (X, Y and the state tile of
// one K slice each; two stages, one where K = 64), the right-hand tile (v or d_o), the masked
// scores. K >= 128: 8 tiles, 73.984 KB (3 blocks per SM).
constexpr int kOutputStageTiles = 3;
inline int HeadOutputStages(int k_dim) { return k_dim / kBK > 1 ? 2 : 1; }
inline size_t HeadOutputSmemBytes(int k_dim) {
  const size_t tiles = kOutputStageTiles * HeadOutputStages(k_dim) + 2;
  return kBT * sizeof(float) + tiles * kTileElems * sizeof(bf16);
}

template <bool kGradV>
__global__ void __launch_bounds__(kThreads, 3)
    HeadOutputKernel(ChunkGatedParams p, const bf16* states) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* G = reinterpret_cast<float*>(smem_raw);
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw + kBT * sizeof(float));
  const int slices = p.k_dim / kBK, stages = slices > 1 ? 2 : 1;
  // Stage s: X (q forward, k backward), Y (k forward, q backward), the state tile (h_c or dh_c,
  // rows of the K slice, columns of this V slice).
  const auto x = [&](int kk) { return tiles + kk % stages * kOutputStageTiles * kTileElems; };
  const auto y = [&](int kk) { return x(kk) + kTileElems; };
  const auto st = [&](int kk) { return x(kk) + 2 * kTileElems; };
  bf16* rhs = tiles + stages * kOutputStageTiles * kTileElems;  // v or d_o
  bf16* scores = rhs + kTileElems;  // P (forward) or P' (backward), bf16
  const Chunk c = LocateChunk(p, BlockChunk(p.v_dim / kBK));
  const int h = blockIdx.y, v0 = BlockSlice(p.v_dim / kBK) * kBK;
  const bf16* x_src = kGradV ? p.k : p.q;
  const bf16* y_src = kGradV ? p.q : p.k;
  const auto issue = [&](int kk) {
    AsyncRows(x(kk), x_src, p.qk_strides, c, h, kk * kBK);
    AsyncRows(y(kk), y_src, p.qk_strides, c, h, kk * kBK);
    AsyncStateTile(st(kk), states, p, c.global, h, kk * kBK, v0);
  };

  GateRegs<Gate::kHead> gate;  // the gate's load first, so that it overlaps the copies' issue
  FetchGate<Gate::kHead>(gate, p, c, h, 0);
  issue(0);
  AsyncRows(rhs, kGradV ? p.d_o : p.v, p.v_strides, c, h, v0);
  __pipeline_commit();
  if (slices > 1) issue(1);
  __pipeline_commit();
  CommitGate<Gate::kHead>(G, gate);  // synchronises

  // Scores S = X Y^T and the inter-chunk part X S_c, over the K slices.
  tile::Acc64 score, acc;
  score.Zero();
  acc.Zero();
  StreamSlices(slices, issue, [&](int kk) {
    tile::MmaBf16Acc64<true, false>(score, kBK, x(kk), kLdBf16, y(kk), kLdBf16);
    tile::MmaBf16Acc64<true, true>(acc, kBK, x(kk), kLdBf16, st(kk), kLdBf16);
  });
  // The scores masked and decayed in registers, stored as the bf16 operand.
  const float scale = p.scale;
  score.Transform([&](int r, int col, float v) {
    // forward: row i = r, column j = col, kept for j <= i; backward: row j = r, column i = col,
    // kept for i >= j. The exponent is G_i - G_j <= 0 in both.
    const bool keep = kGradV ? col >= r : col <= r;
    const float gap = kGradV ? G[col] - G[r] : G[r] - G[col];
    return keep ? v * scale * exp2f(gap) : 0.0f;
  });
  score.StoreBf16(scores, kLdBf16);
  // The inter-chunk part's rows decayed, then the intra-chunk part.
  const float g_last = G[kBT - 1];
  acc.Transform([&](int r, int, float v) {
    return v * (kGradV ? exp2f(g_last - G[r]) : scale * exp2f(G[r]));
  });
  __syncthreads();  // every warp's scores are stored; the stages are no longer read
  tile::MmaBf16Acc64<true, true>(acc, kBT, scores, kLdBf16, rhs, kLdBf16);
  StoreAccRows(acc, x(0), kGradV ? p.dv : p.o, p.v_strides, c, h, v0);
}

}  // namespace flame::kernels::gated_chunk
