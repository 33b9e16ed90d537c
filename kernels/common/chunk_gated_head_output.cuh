// o (forward) and dv (backward) of chunk_simple_gla (the per-head gate; chunk_gla's are in
// chunk_gated_channel.cuh). Device code; included through chunk_gated.cuh.
//
// HeadOutputKernel: one block per (chunk, head, 64-wide V slice), every product accumulated in
// registers (HeadChunkOutputKernel, below, takes K <= 128 with one block per (chunk, head)):
//   forward:  o[:, v]  = diag(scale 2^G) (Q h_c[:, v]) + P V[:, v],
//             P_ij = scale (q_i . k_j) 2^(G_i - G_j) for j <= i
//   backward: dv[:, v] = diag(2^(G_last - G)) (K dh_c[:, v]) + P^T dO[:, v]
// A head gate is one scalar per token, so the decays factor out of the products as row and
// column scalings: no decayed copy of q or k is made. The forward computes the scores per V slice
// (2 x 64 x 64 x K FLOPs) so that the slices run as separate blocks; the first slice's block also
// writes P (bf16) to the caller's intra_scores, which the backward reads instead of recomputing
// it (as chunk_gla does): its blocks then copy no q tiles and do about 40% fewer products, and
// with 6 tiles (55 KB) and 64 registers four of them fit an SM. Measured on the H200 at
// (8,4096,8,256): dv 401 -> 305 us per call (333 with three blocks per SM), o 400 -> 411 (the
// scores' store); forward + backward 3-4% faster at the three long shapes.
// The K slices stream through two stages of shared memory (asynchronous copies of the next
// slice's tiles while this slice's are multiplied), both sums over K (the forward's scores and
// X h_c) accumulating at once; so the block's shared memory does not grow with K.
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

// Dynamic shared memory: G (64 fp32), then bf16 tiles: the stages (one K slice's tiles each: the
// forward's q, k and h_c tiles, the backward's k and dh_c; two stages, one where K = 64), the
// right-hand tile (v or d_o), the scores. K >= 128: 8 tiles forward (73.984 KB), 6 backward.
__host__ __device__ constexpr int HeadOutputStageTiles(bool grad_v) { return grad_v ? 2 : 3; }
inline int HeadOutputStages(int k_dim) { return k_dim / kBK > 1 ? 2 : 1; }
inline size_t HeadOutputSmemBytes(int k_dim, bool grad_v) {
  const size_t tiles = HeadOutputStageTiles(grad_v) * HeadOutputStages(k_dim) + 2;
  return kBT * sizeof(float) + tiles * kTileElems * sizeof(bf16);
}

template <bool kGradV>
__global__ void __launch_bounds__(kThreads, kGradV ? 4 : 3)
    HeadOutputKernel(ChunkGatedParams p, const bf16* states) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* G = reinterpret_cast<float*>(smem_raw);
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw + kBT * sizeof(float));
  constexpr int kStageTiles = HeadOutputStageTiles(kGradV);
  const int slices = p.k_dim / kBK, stages = slices > 1 ? 2 : 1;
  // Stage s: X (q forward, k backward), forward also Y = k, then the state tile (h_c or dh_c,
  // rows of the K slice, columns of this V slice).
  const auto x = [&](int kk) { return tiles + kk % stages * kStageTiles * kTileElems; };
  const auto y = [&](int kk) { return x(kk) + kTileElems; };
  const auto st = [&](int kk) { return x(kk) + (kStageTiles - 1) * kTileElems; };
  bf16* rhs = tiles + stages * kStageTiles * kTileElems;  // v or d_o
  bf16* scores = rhs + kTileElems;                        // P, bf16
  const int v_slice = BlockSlice(p.v_dim / kBK);
  const Chunk c = LocateChunk(p, BlockChunk(p.heads, p.v_dim / kBK));
  const int h = BlockHead(p.heads, p.v_dim / kBK), v0 = v_slice * kBK;
  bf16* const kept_scores = p.intra_scores + ScoresOffset(p, c.global, h);
  const auto issue = [&](int kk) {
    AsyncRows(x(kk), kGradV ? p.k : p.q, p.qk_strides, c, h, kk * kBK);
    if (!kGradV) AsyncRows(y(kk), p.k, p.qk_strides, c, h, kk * kBK);
    AsyncStateTile(st(kk), states, p, c.global, h, kk * kBK, v0);
  };

  GateRegs<Gate::kHead> gate;  // the gate's load first, so that it overlaps the copies' issue
  FetchGate<Gate::kHead>(gate, p, c, h, 0);
  issue(0);
  AsyncRows(rhs, kGradV ? p.d_o : p.v, p.v_strides, c, h, v0);
  if (kGradV) AsyncBlock(scores, kept_scores, kBT);
  __pipeline_commit();
  if (slices > 1) issue(1);
  __pipeline_commit();
  CommitGate<Gate::kHead>(G, gate);  // synchronises

  // The forward's scores S = X Y^T and the inter-chunk part X S_c, over the K slices.
  tile::Acc64 score, acc;
  score.Zero();
  acc.Zero();
  StreamSlices(slices, issue, [&](int kk) {
    if (!kGradV) tile::MmaBf16Acc64<true, false>(score, kBK, x(kk), kLdBf16, y(kk), kLdBf16);
    tile::MmaBf16Acc64<true, true>(acc, kBK, x(kk), kLdBf16, st(kk), kLdBf16);
  });
  const float scale = p.scale;
  if (!kGradV) {
    // The scores masked (j <= i) and decayed (G_i - G_j <= 0) in registers, stored as the bf16
    // operand.
    MaskAndDecayScores(score, G, scale);
    score.StoreBf16(scores, kLdBf16);
  }
  // The inter-chunk part's rows decayed, then the intra-chunk part.
  const float g_last = G[kBT - 1];
  acc.Transform([&](int r, int, float v) {
    return v * (kGradV ? exp2f(g_last - G[r]) : scale * exp2f(G[r]));
  });
  __syncthreads();  // every warp's scores are stored; the stages are no longer read
  if (!kGradV && v_slice == 0) {  // P for the backward, once per chunk and head
    ForBlockItems<kThreads, kBT * 8>([&](int idx) {
      const int r = idx / 8, c8 = idx % 8;
      *reinterpret_cast<uint4*>(kept_scores + r * kBT + c8 * 8) =
          *reinterpret_cast<const uint4*>(scores + r * kLdBf16 + c8 * 8);
    });
  }
  // forward P V; backward P^T dO (P read as a column-major left operand).
  tile::MmaBf16Acc64<!kGradV, true>(acc, kBT, scores, kLdBf16, rhs, kLdBf16);
  StoreAccRows(acc, x(0), kGradV ? p.dv : p.o, p.v_strides, c, h, v0);
}

// o (forward) or dv (backward) with one block per (chunk, head), for K <= kChunkOutputMaxK: the
// K slices' tiles of X (q forward, k backward) stay in shared memory beside the scores (computed
// once per chunk forward, from k's resident tiles; copied backward), and the V slices' tiles (v or
// d_o, and the state's K x 64 columns) stream through two stages -- where HeadOutputKernel's
// V-slice blocks each copy X and the scores, and forward compute the scores, V / 64 times.
// K = 128: 11 tiles forward (101 KB), 9 backward (83 KB), two blocks per SM. (A template on the
// gate only so that the header defines it in each launcher's translation unit without a clash.)
constexpr int kChunkOutputMaxK = 128;
inline size_t HeadChunkOutputSmemBytes(int k_dim, int v_dim, bool grad_v) {
  const int ks = k_dim / kBK, stages = v_dim / kBK > 1 ? 2 : 1;
  const size_t tiles = (grad_v ? 1 : 2) * ks + 1 + stages * (1 + ks);
  return kBT * sizeof(float) + tiles * kTileElems * sizeof(bf16);
}

template <Gate kGate, bool kGradV>
__global__ void __launch_bounds__(kThreads, 2)
    HeadChunkOutputKernel(ChunkGatedParams p, const bf16* states) {
  static_assert(kGate == Gate::kHead, "the channel gate's are ChannelOutputKernel's");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* G = reinterpret_cast<float*>(smem_raw);
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw + kBT * sizeof(float));
  const int ks = p.k_dim / kBK, vs = p.v_dim / kBK, stages = vs > 1 ? 2 : 1;
  const auto xx = [&](int kk) { return tiles + kk * kTileElems; };         // q or k
  const auto xk = [&](int kk) { return tiles + (ks + kk) * kTileElems; };  // forward: k
  bf16* scores = tiles + (kGradV ? 1 : 2) * ks * kTileElems;
  // Stage of V slice j: v's or d_o's columns, then the state's rows of each K slice in them.
  const auto rhs = [&](int j) { return scores + (1 + j % stages * (1 + ks)) * kTileElems; };
  const auto st = [&](int j, int kk) { return rhs(j) + (1 + kk) * kTileElems; };
  const Chunk c = LocateChunk(p, BlockChunk(p.heads));
  const int h = BlockHead(p.heads);
  bf16* const kept_scores = p.intra_scores + ScoresOffset(p, c.global, h);
  const ChunkRowsCopy qk_rows(p.qk_strides, c, h), v_rows(p.v_strides, c, h);
  const auto issue = [&](int j) {
    v_rows.Issue(rhs(j), kGradV ? p.d_o : p.v, j * kBK);
    for (int kk = 0; kk < ks; ++kk) {
      AsyncStateTile(st(j, kk), states, p, c.global, h, kk * kBK, j * kBK);
    }
  };

  GateRegs<Gate::kHead> gate;  // the gate's load first, so that it overlaps the copies' issue
  FetchGate<Gate::kHead>(gate, p, c, h, 0);
  for (int kk = 0; kk < ks; ++kk) {
    qk_rows.Issue(xx(kk), kGradV ? p.k : p.q, kk * kBK);
    if (!kGradV) qk_rows.Issue(xk(kk), p.k, kk * kBK);
  }
  if (kGradV) AsyncBlock(scores, kept_scores, kBT);
  issue(0);
  __pipeline_commit();
  if (vs > 1) issue(1);
  __pipeline_commit();
  CommitGate<Gate::kHead>(G, gate);  // synchronises

  const float scale = p.scale, g_last = G[kBT - 1];
  StreamSlices(vs, issue, [&](int j) {
    if (!kGradV && j == 0) {  // the scores, masked (j <= i) and decayed, once
      tile::Acc64 score;
      score.Zero();
      for (int kk = 0; kk < ks; ++kk) {
        tile::MmaBf16Acc64<true, false>(score, kBK, xx(kk), kLdBf16, xk(kk), kLdBf16);
      }
      MaskAndDecayScores(score, G, scale);
      score.StoreBf16(scores, kLdBf16);
    }
    // The inter-chunk part X h_c (or X dh_c) over the K slices, its rows decayed.
    tile::Acc64 acc;
    acc.Zero();
    for (int kk = 0; kk < ks; ++kk) {
      tile::MmaBf16Acc64<true, true>(acc, kBK, xx(kk), kLdBf16, st(j, kk), kLdBf16);
    }
    acc.Transform([&](int r, int, float v) {
      return v * (kGradV ? exp2f(g_last - G[r]) : scale * exp2f(G[r]));
    });
    if (!kGradV && j == 0) {
      __syncthreads();                                 // every warp's scores are stored
      ForBlockItems<kThreads, kBT * 8>([&](int idx) {  // P for the backward
        const int r = idx / 8, c8 = idx % 8;
        *reinterpret_cast<uint4*>(kept_scores + r * kBT + c8 * 8) =
            *reinterpret_cast<const uint4*>(scores + r * kLdBf16 + c8 * 8);
      });
    }
    // forward P V; backward P^T dO (P read as a column-major left operand).
    tile::MmaBf16Acc64<!kGradV, true>(acc, kBT, scores, kLdBf16, rhs(j), kLdBf16);
    __syncthreads();  // no warp reads this slice's right-hand tile any more: it stages the result
    StoreAccRows(acc, rhs(j), kGradV ? p.dv : p.o, p.v_strides, c, h, j * kBK);
  });
}

}  // namespace flame::kernels::gated_chunk
