// dq, dk and dg of chunk_simple_gla (the per-head gate; chunk_gla's are in
// chunk_gated_channel.cuh), and, where V <= 256, dv. Device code; included through
// chunk_gated.cuh.
//
// HeadGradQKKernel: one block per (chunk, head, 64-wide K slice), products accumulated in
// registers (HeadChunkGradQKKernel, below, takes V <= 256 with one block per (chunk, head), and
// computes dv and dg itself as well):
//   dP    = scale tril(dO V^T) 2^(G_i - G_j)                  (recomputed per K slice)
//   dq    = diag(scale 2^G) (dO h_c^T) + dP K
//   dk    = diag(2^(G_last - G)) (V dh_c^T) + dP^T Q            (the first term is dk_inter)
// The three sums over V (dO V^T, dO h_c^T, V dh_c^T) accumulate together while the V slices
// stream through two stages of shared memory (asynchronous copies of the next slice's d_o, v,
// h_c and dh_c tiles while this slice's are multiplied); then dP K and dP^T Q.
// dg needs sums over every key channel of a row, which the K slices hold between them, so each
// block leaves its slice's sums in `parts` and HeadGateGradKernel (one block per chunk and head)
// adds them up:
//   dg_i = 2^G_last <dh_c, h_c> + sum_{r<i} kdk_r + sum_{r>=i} (q_r.dq_r - k_r.dk_r + kdk_r),
//   kdk_r = k_r . dk_inter_r
// (the per-chunk form of the reverse cumsum; see chunk_gated_channel.cuh.)
// Why: with every V slice resident, V = 256 took 19 tiles (one block per SM) and 1687 us per
// call at (8,4096,8,256). An earlier layout (one block per chunk, synchronous loads before every
// product, C in shared memory) took 514 us per call at (4,2048,16,128), waiting on memory with
// two blocks per SM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// One K slice's dg sums for one (chunk, head): kdk_r (64), q.dq - k.dk per row (64), and
// 2^G_last <dh_c, h_c> over the slice's state rows.
constexpr int kPartKdk = 0;
constexpr int kPartTerms = kBT;
constexpr int kPartState = 2 * kBT;
constexpr int kPartStride = 2 * kBT + 1;

inline size_t GradPartsBytes(const ChunkGatedParams& p, int chunks) {
  return static_cast<size_t>(chunks) * p.heads * (p.k_dim / kBK) * kPartStride * sizeof(float);
}

// Dynamic shared memory: a 2.5 KB header (G, and the parts of the dg sums: two per row and
// column tile, one per warp), then bf16 tiles: q, k (this K slice), dP, and the stages (d_o, v,
// h_c and dh_c of one V slice each; two stages, one where V = 64). V >= 128: 11 tiles, 104 KB
// (2 blocks per SM).
constexpr int kGradHeaderBytes = 3072;
constexpr int kGradStageTiles = 4;
inline size_t HeadGradQKSmemBytes(int v_dim) {
  const size_t tiles = 3 + kGradStageTiles * (v_dim / kBK > 1 ? 2 : 1);
  return kGradHeaderBytes + tiles * kTileElems * sizeof(bf16);
}

// The dg sums of a block go through shared memory in a fixed order, so that they are the same
// bits in every run: a row's part from each of the four warps across its columns (instead of
// shared atomics, whose order varied -- at the weak-decay test case, where dg is a small
// difference of large sums, its error moved between 1.1e-2 and 1.7e-2 from run to run), and
// each warp's part of the block sum.
constexpr int kColumnTiles = tile::kAcc64ColumnTiles;
constexpr int kChunkGateSumFloats = 2 * kBT + 3;  // ChunkGateSums: its sums, two totals
static_assert((kBT + 2 * kBT * kColumnTiles + kWarps + kChunkGateSumFloats) * sizeof(float) <=
                  kGradHeaderBytes,
              "G, the dg sums' parts and ChunkGateSums's fit the header");

// A block's dg sums in its shared-memory header, after G: two parts per row and column tile
// (kdk_r and q_r.dq_r - k_r.dk_r), one per warp (<h_c, dh_c>), then ChunkGateSums's floats.
struct GradSumParts {
  float* kdk;
  float* terms;
  float* state;
  float* chunk;
  __device__ explicit GradSumParts(float* after_g)
      : kdk(after_g),
        terms(after_g + kBT * kColumnTiles),
        state(terms + kBT * kColumnTiles),
        chunk(state + kWarps) {}
};

// The end of one K slice's dq and dk, their sums over V done and dP stored to shared memory
// (before_dp() orders those stores before its products, where the caller has not yet): the rows
// decayed, dq += dP K, dk += dP^T Q, and, with kGateGrad, the slice's dg sums' parts.
template <bool kGateGrad, typename BeforeDp>
__device__ inline void FinishSliceGrads(tile::Acc64& dq, tile::Acc64& dk, float state_dot,
                                        const float* G, float scale, const bf16* dP, const bf16* xq,
                                        const bf16* xk, const GradSumParts& sums,
                                        BeforeDp before_dp) {
  dq.Transform([&](int r, int, float x) { return x * (scale * exp2f(G[r])); });
  const float g_last = G[kBT - 1];
  dk.Transform([&](int r, int, float x) { return x * exp2f(g_last - G[r]); });
  if constexpr (kGateGrad) {
    tile::StoreRowSumParts(sums.kdk, [&](int r, int col, int i, int e) {
      const float2 k2 = tile::TilePairAt(xk, r, col);
      return k2.x * dk.part[i].x[e] + k2.y * dk.part[i].x[e + 1];
    });
  }
  before_dp();
  tile::MmaBf16Acc64<true, true>(dq, kBT, dP, kLdBf16, xk, kLdBf16);  // dq += dP K
  // dk += dP^T Q, with A(j, i) = dP[i][j].
  tile::MmaBf16Acc64<false, true>(dk, kBT, dP, kLdBf16, xq, kLdBf16);

  if constexpr (kGateGrad) {
    // Per element, then summed: at strong decays q.dq and k.dk nearly cancel (for a lone diagonal
    // score dq_t = dP_tt k_t, dk_t = dP_tt q_t), and two separate row sums would leave their
    // fp32 rounding as the whole of dg.
    tile::StoreRowSumParts(sums.terms, [&](int r, int col, int i, int e) {
      const float2 q2 = tile::TilePairAt(xq, r, col), k2 = tile::TilePairAt(xk, r, col);
      return (q2.x * dq.part[i].x[e] - k2.x * dk.part[i].x[e]) +
             (q2.y * dq.part[i].x[e + 1] - k2.y * dk.part[i].x[e + 1]);
    });
    state_dot = WarpSum(state_dot);
    if (threadIdx.x % 32 == 0) sums.state[threadIdx.x / 32] = state_dot;
  }
}

// One K slice's dg sums from their parts (after a barrier) into `part`, kPartStride floats.
__device__ inline void StoreSliceGradParts(float* part, const GradSumParts& sums, float g_last) {
  if (threadIdx.x < kBT) {
    part[kPartKdk + threadIdx.x] = tile::RowSum(sums.kdk, threadIdx.x);
    part[kPartTerms + threadIdx.x] = tile::RowSum(sums.terms, threadIdx.x);
  }
  if (threadIdx.x == 0) {
    float state_sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) state_sum += sums.state[w];
    part[kPartState] = state_sum * exp2f(g_last);
  }
}

// dg of one (chunk, head) in the block that computed every K slice's sums (HeadChunkGradQKKernel):
// row r's sums over the slices, added slice by slice in HeadGateGradKernel's order by thread
// r < 64, kept in shared memory (held in registers across the block's loop, they spilled), then
//   dg_i = state + sum_{r<i} kdk_r + sum_{r>=i} (terms_r + kdk_r)
// by scans across the two warps of rows instead of HeadGateGradKernel's serial sums (a launch,
// and the parts' round trip through memory, saved).
struct ChunkGateSums {
  float* kdk;     // [64]
  float* terms;   // [64]
  float* state;   // [1]
  float* totals;  // [2]: kdk over rows 0-31, terms + kdk over rows 32-63
  __device__ explicit ChunkGateSums(const GradSumParts& sums)
      : kdk(sums.chunk), terms(kdk + kBT), state(terms + kBT), totals(state + 1) {}

  // One K slice's parts (after a barrier), as StoreSliceGradParts would store them; `first`
  // starts the sums.
  __device__ void Add(const GradSumParts& sums, float g_last, bool first) const {
    const int r = threadIdx.x;
    if (r >= kBT) return;
    kdk[r] = (first ? 0.0f : kdk[r]) + tile::RowSum(sums.kdk, r);
    terms[r] = (first ? 0.0f : terms[r]) + tile::RowSum(sums.terms, r);
    if (r == 0) {
      float state_sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) state_sum += sums.state[w];
      *state = (first ? 0.0f : *state) + state_sum * exp2f(g_last);
    }
  }

  // Every thread of the block calls it, after a barrier past the last Add: dg of the chunk's rows.
  __device__ void Store(const ChunkGatedParams& p, const Chunk& c, int h) const {
    const int i = threadIdx.x, lane = i % 32;
    // Within each warp of rows: the inclusive prefix sums of kdk and suffix sums of
    // terms + kdk (the warps past row 63 scan zeros).
    const float own_kdk = i < kBT ? kdk[i] : 0.0f;
    float prefix = own_kdk, suffix = i < kBT ? terms[i] + own_kdk : 0.0f;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const float up = __shfl_up_sync(0xffffffffu, prefix, off);
      const float down = __shfl_down_sync(0xffffffffu, suffix, off);
      if (lane >= off) prefix += up;
      if (lane + off < 32) suffix += down;
    }
    float before = __shfl_up_sync(0xffffffffu, prefix, 1);  // the exclusive prefix
    if (lane == 0) before = 0.0f;
    if (i == 31) totals[0] = prefix;
    if (i == 32) totals[1] = suffix;
    __syncthreads();
    if (i >= kBT || i >= c.rows) return;
    if (i >= 32) before += totals[0];
    if (i < 32) suffix += totals[1];
    *RowPtr(p.dg, p.g_strides, c.batch, c.t0 + i, h) = *state + before + suffix;
  }
};

// kGateGrad: also the dg sums (g given and dg requested; not with g_gamma).
template <bool kGateGrad>
__global__ void __launch_bounds__(kThreads, 2)
    HeadGradQKKernel(ChunkGatedParams p, const bf16* states, const bf16* d_states, float* parts) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* G = reinterpret_cast<float*>(smem_raw);
  const GradSumParts sums(G + kBT);
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw + kGradHeaderBytes);
  const int vs = p.v_dim / kBK, stages = vs > 1 ? 2 : 1;
  bf16* xq = tiles;            // q, this K slice
  bf16* xk = xq + kTileElems;  // k
  bf16* dP = xk + kTileElems;
  // Stage of V slice j: d_o, v, the h_c and dh_c tiles (rows of this K slice, columns of slice j).
  const auto xo = [&](int j) { return dP + (1 + j % stages * kGradStageTiles) * kTileElems; };
  const auto xv = [&](int j) { return xo(j) + kTileElems; };
  const auto hs = [&](int j) { return xo(j) + 2 * kTileElems; };
  const auto dhs = [&](int j) { return xo(j) + 3 * kTileElems; };
  const int ks = p.k_dim / kBK;
  const Chunk c = LocateChunk(p, BlockChunk(p.heads, ks));
  const int h = BlockHead(p.heads, ks), k0 = BlockSlice(ks) * kBK;
  const auto issue = [&](int j) { AsyncGradSlice(xo(j), p, c, h, k0, j, states, d_states); };

  GateRegs<Gate::kHead> gate;  // the gate's load first, so that it overlaps the copies' issue
  FetchGate<Gate::kHead>(gate, p, c, h, 0);
  AsyncRows(xq, p.q, p.qk_strides, c, h, k0);
  AsyncRows(xk, p.k, p.qk_strides, c, h, k0);
  issue(0);
  __pipeline_commit();
  if (vs > 1) issue(1);
  __pipeline_commit();
  CommitGate<Gate::kHead>(G, gate);  // synchronises

  // Over the V slices: dO V^T (B(vv, j) = v[j][vv], the column-major view of v), dO h_c^T and
  // V dh_c^T (B(vv, kk) = h_c[kk][vv]), and <h_c, dh_c> for dg.
  tile::Acc64 dq, dk, score;
  dq.Zero();
  dk.Zero();
  score.Zero();
  float state_dot = 0.0f;
  StreamSlices(vs, issue, [&](int j) {
    tile::MmaBf16Acc64<true, false>(score, kBK, xo(j), kLdBf16, xv(j), kLdBf16);
    tile::MmaBf16Acc64<true, false>(dq, kBK, xo(j), kLdBf16, hs(j), kLdBf16);
    tile::MmaBf16Acc64<true, false>(dk, kBK, xv(j), kLdBf16, dhs(j), kLdBf16);
    if constexpr (kGateGrad) state_dot += tile::TileDotPart(hs(j), dhs(j), kLdBf16);
  });

  MaskAndDecayScores(score, G, p.scale);
  score.StoreBf16(dP, kLdBf16);
  FinishSliceGrads<kGateGrad>(dq, dk, state_dot, G, p.scale, dP, xq, xk, sums,
                              [] { __syncthreads(); });  // dP is stored
  __syncthreads();  // no warp reads the stages any more: they take the results
  StoreAccRows(dq, xo(0), p.dq, p.qk_strides, c, h, k0);
  StoreAccRows(dk, xv(0), p.dk, p.qk_strides, c, h, k0);
  if constexpr (kGateGrad) {
    const int64_t slice = (int64_t{c.global} * p.heads + h) * ks + BlockSlice(ks);
    StoreSliceGradParts(parts + slice * kPartStride, sums, G[kBT - 1]);
  }
}

// dq, dk, the dg sums and dv with one block per (chunk, head), for V <= kChunkGradMaxV: d_o and v
// of every V slice stay in shared memory, so dP = scale tril(dO V^T) 2^(G_i - G_j) is computed and
// d_o and v are copied once per chunk, where HeadGradQKKernel's K-slice blocks each do both. The
// K slices follow one another: the state tiles (h_c and dh_c) of step s = (K slice s / (V/64), V
// slice s % (V/64)) stream through two stages, and q and k of the next K slice are copied once
// the products of this one are done with them. The block adds up dg itself (ChunkGateSums).
// V = 128: 12 tiles with the kept scores P (111 KB), two blocks per SM; V = 256: 16, one.
// It also computes dv = diag(2^(G_last - G)) (K dh_c) + P^T dO: each step adds K dh_c's part of
// its tiles (k and dh_c are in shared memory for dk already) to an accumulator per V slice, and
// the end adds P^T dO from the forward's kept scores P and the resident d_o -- so dv costs one
// score tile's read and its own store, where HeadChunkOutputKernel<kGradV> read k, d_o, P and
// dh_c again. Measured on the H200 at (1,8192,96,128): 707 + 290 us (this kernel, then
// HeadChunkOutputKernel's dv) -> 915; dv at the end instead, streaming k and dh_c again, 969.
// The block ends with dg (ChunkGateSums): 880 + 27 (HeadGateGradKernel) -> 895 us. Then fewer
// instructions per chunk (ncu: issue-bound, mma waiting on ldmatrix): the dg sums' quad
// reductions by one butterfly (StoreRowSumParts), <h_c, dh_c> on tensor cores (TileDotPart) and
// the step's slices carried instead of divided took it from 3558 to 3293 instructions per warp;
// each state tile's address formed once (AsyncStateTile), which also ended ptxas's 16-byte spill,
// and the mask's gate loads hoisted, removed more: 882 -> 820 us in all (side by side).
// kMaxVs: the V slices the block holds at most (2, or 4 at V = 256).
constexpr int kChunkGradMaxV = 256;
inline size_t HeadChunkGradQKSmemBytes(int v_dim) {
  return kGradHeaderBytes + (2 * (v_dim / kBK) + 8) * kTileElems * sizeof(bf16);
}

template <bool kGateGrad, int kMaxVs>
__global__ void __launch_bounds__(kThreads, kMaxVs <= 2 ? 2 : 1)
    HeadChunkGradQKKernel(ChunkGatedParams p, const bf16* states, const bf16* d_states) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* G = reinterpret_cast<float*>(smem_raw);
  const GradSumParts sums(G + kBT);
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw + kGradHeaderBytes);
  const int ks = p.k_dim / kBK, vs = p.v_dim / kBK, steps = ks * vs;
  const auto xo = [&](int j) { return tiles + j * kTileElems; };         // d_o, V slice j
  const auto xv = [&](int j) { return tiles + (vs + j) * kTileElems; };  // v
  bf16* dP = tiles + 2 * vs * kTileElems;
  bf16* xq = dP + kTileElems;  // q, the current K slice
  bf16* xk = xq + kTileElems;  // k
  const auto hs = [&](int s) { return xk + (1 + s % 2 * 2) * kTileElems; };
  const auto dhs = [&](int s) { return hs(s) + kTileElems; };
  bf16* kept_scores = xk + 5 * kTileElems;  // P, the forward's
  const Chunk c = LocateChunk(p, BlockChunk(p.heads));
  const int h = BlockHead(p.heads);
  // Step s's (K slice kk, V slice j) follows the steps in order, so the loop below carries kk and
  // j from step to step: s / vs and s % vs, with vs known only at run time, took ~20 instructions
  // each (an integer division) per step.
  const auto next_slices = [&](int& kk, int& j) {
    if (++j == vs) j = 0, ++kk;
  };
  const auto issue = [&](int s, int kk, int j) {  // one group per step, empty past the last
    if (s < steps) {
      AsyncStateTile(hs(s), states, p, c.global, h, kk * kBK, j * kBK);
      AsyncStateTile(dhs(s), d_states, p, c.global, h, kk * kBK, j * kBK);
    }
    __pipeline_commit();
  };
  const ChunkRowsCopy qk_rows(p.qk_strides, c, h), v_rows(p.v_strides, c, h);
  const auto issue_qk = [&](int kk) {
    qk_rows.Issue(xq, p.q, kk * kBK);
    qk_rows.Issue(xk, p.k, kk * kBK);
  };

  GateRegs<Gate::kHead> gate;  // the gate's load first, so that it overlaps the copies' issue
  FetchGate<Gate::kHead>(gate, p, c, h, 0);
  for (int j = 0; j < vs; ++j) {
    v_rows.Issue(xo(j), p.d_o, j * kBK);
    v_rows.Issue(xv(j), p.v, j * kBK);
  }
  issue_qk(0);
  AsyncBlock(kept_scores, p.intra_scores + ScoresOffset(p, c.global, h), kBT);
  int next_kk = 0, next_j = 0;  // the slices of the step issued next
  issue(0, next_kk, next_j);    // the first group: d_o, v, q and k of K slice 0, P, and step 0
  next_slices(next_kk, next_j);
  issue(1, next_kk, next_j);
  CommitGate<Gate::kHead>(G, gate);  // synchronises
  __pipeline_wait_prior(1);
  __syncthreads();

  const float scale = p.scale, g_last = G[kBT - 1];
  {  // dP over the V slices (B(vv, j) = v[j][vv], the column-major view of v)
    tile::Acc64 score;
    score.Zero();
    for (int j = 0; j < vs; ++j) {
      tile::MmaBf16Acc64<true, false>(score, kBK, xo(j), kLdBf16, xv(j), kLdBf16);
    }
    MaskAndDecayScores(score, G, scale);
    score.StoreBf16(dP, kLdBf16);  // read after the first K slice's barrier below
  }

  tile::Acc64 dq, dk;
  dq.Zero();
  dk.Zero();
  float state_dot = 0.0f;
  const ChunkGateSums gate_sums(sums);
  // dv's inter-chunk part K dh_c per V slice, summed over the K slices as they pass.
  tile::Acc64 dv[kMaxVs];
#pragma unroll
  for (int i = 0; i < kMaxVs; ++i) dv[i].Zero();
  // dv[j] by a compile-time index (a runtime one would put the array in local memory).
  const auto with_dv = [&](int j, auto f) {
#pragma unroll
    for (int i = 0; i < kMaxVs; ++i) {
      if (i == j) f(dv[i]);
    }
  };
  bool qk_newest = false;  // the latest group is the next K slice's q and k, not a step's states
  bool qk_in_flight = false;  // ... and no warp has waited for it yet
  for (int s = 0, kk = 0, j = 0; s < steps; ++s, next_slices(kk, j)) {
    if (s > 0) {
      if (qk_newest) {
        __pipeline_wait_prior(1);
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();  // step s's states are in; every warp is done with step s - 1's stage
      next_slices(next_kk, next_j);
      issue(s + 1, next_kk, next_j);
      qk_newest = false;
    }
    // dO h_c^T and V dh_c^T (B(vv, kk) = h_c[kk][vv]), and <h_c, dh_c> for dg.
    tile::MmaBf16Acc64<true, false>(dq, kBK, xo(j), kLdBf16, hs(s), kLdBf16);
    tile::MmaBf16Acc64<true, false>(dk, kBK, xv(j), kLdBf16, dhs(s), kLdBf16);
    if (qk_in_flight) {  // k of this K slice (all but the newest group: step s + 1's states)
      __pipeline_wait_prior(1);
      __syncthreads();
      qk_in_flight = false;
    }
    with_dv(j, [&](tile::Acc64& acc) {  // K dh_c (B(kk, vv) = dh_c[kk][vv])
      tile::MmaBf16Acc64<true, true>(acc, kBK, xk, kLdBf16, dhs(s), kLdBf16);
    });
    if constexpr (kGateGrad) state_dot += tile::TileDotPart(hs(s), dhs(s), kLdBf16);
    if (j + 1 < vs) continue;

    // K slice kk's sums over V are done: its rows decayed, then dP K and dP^T Q.
    __pipeline_wait_prior(1);  // q and k of this slice (all but the newest step's group)
    __syncthreads();           // ... and, the first time, dP
    FinishSliceGrads<kGateGrad>(dq, dk, state_dot, G, scale, dP, xq, xk, sums, [] {});
    __syncthreads();  // no warp reads this step's stage any more: it stages the results
    StoreAccRows(dq, hs(s), p.dq, p.qk_strides, c, h, kk * kBK);
    StoreAccRows(dk, dhs(s), p.dk, p.qk_strides, c, h, kk * kBK);
    if constexpr (kGateGrad) gate_sums.Add(sums, g_last, kk == 0);
    if (kk + 1 < ks) {  // every warp is past its reads of q and k (StoreAccRows synchronised)
      issue_qk(kk + 1);
      __pipeline_commit();
      qk_newest = qk_in_flight = true;
    }
    dq.Zero();
    dk.Zero();
    state_dot = 0.0f;
  }
  // dv: its rows decayed, + P^T dO; v's tiles, no longer read, stage the rows.
  for (int j = 0; j < vs; ++j) {
    with_dv(j, [&](tile::Acc64& acc) {
      acc.Transform([&](int r, int, float x) { return x * exp2f(g_last - G[r]); });
      // P read as a column-major left operand.
      tile::MmaBf16Acc64<false, true>(acc, kBT, kept_scores, kLdBf16, xo(j), kLdBf16);
      StoreAccRows(acc, xv(j), p.dv, p.v_strides, c, h, j * kBK);
    });
  }
  if constexpr (kGateGrad) gate_sums.Store(p, c, h);  // (StoreAccRows synchronised after Add)
}

// dg of one (chunk, head) from the K slices' sums: 64 threads, one per row. (A template only so
// that the header defines it in each launcher's translation unit without a clash.)
template <Gate kGate>
__global__ void __launch_bounds__(kBT) HeadGateGradKernel(ChunkGatedParams p, const float* parts) {
  static_assert(kGate == Gate::kHead, "the channel gate's dg comes from ChannelGradQKKernel");
  __shared__ float kdk[kBT], terms[kBT];
  const Chunk c = LocateChunk(p, BlockChunk(p.heads));
  const int h = BlockHead(p.heads), i = threadIdx.x, slices = p.k_dim / kBK;
  const float* part = parts + (int64_t{c.global} * p.heads + h) * slices * kPartStride;
  float kd = 0.0f, term = 0.0f, state = 0.0f;
  for (int s = 0; s < slices; ++s, part += kPartStride) {
    kd += part[kPartKdk + i];
    term += part[kPartTerms + i];
    state += part[kPartState];
  }
  kdk[i] = kd;
  terms[i] = term;
  __syncthreads();
  if (i >= c.rows) return;
  float acc = state;
  for (int r = 0; r < i; ++r) acc += kdk[r];
  for (int r = i; r < kBT; ++r) acc += terms[r] + kdk[r];
  *RowPtr(p.dg, p.g_strides, c.batch, c.t0 + i, h) = acc;
}

}  // namespace flame::kernels::gated_chunk
