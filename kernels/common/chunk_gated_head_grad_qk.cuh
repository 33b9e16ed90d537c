// dq, dk and dg of chunk_simple_gla (the per-head gate; chunk_gla's are in
// chunk_gated_channel.cuh). Device code; included through chunk_gated.cuh.
//
// HeadGradQKKernel: one block per (chunk, head, 64-wide K slice), products accumulated in
// registers (HeadChunkGradQKKernel, below, takes V <= 128 with one block per (chunk, head)):
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
constexpr int kGradHeaderBytes = 2560;
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
constexpr int kColumnTiles = 4;  // the warps that share a row of an Acc64 (16 columns each)
static_assert((kBT + 2 * kBT * kColumnTiles + kWarps) * sizeof(float) <= kGradHeaderBytes,
              "G and the dg sums' parts fit the header");

// parts[r * kColumnTiles + w] = the sum over this warp's columns of f(r, col, i, e), f reading
// element e of part i of Acc64-shaped accumulators, for every row r the lane holds: the quad's
// lanes reduce by shuffles, one lane of the quad stores.
template <typename F>
__device__ inline void StoreRowSumParts(float* parts, F f) {
  float* const own = parts + tile::Acc64::Col() / 16;  // this warp's column tile
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = tile::Acc64::ElementRow(i, 2 * half);
      float sum = 0.0f;
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {  // the elements of this row: x[4 n8 + 2 half + b]
          const int e = 4 * n8 + 2 * half + b;
          sum += f(row, tile::Acc64::ElementCol(e), i, e);
        }
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (threadIdx.x % 4 == 0) own[row * kColumnTiles] = sum;
    }
  }
}

// Row r's sum from its parts, always in the same order.
__device__ inline float RowSum(const float* parts, int r) {
  const float* p = parts + r * kColumnTiles;
  return ((p[0] + p[1]) + p[2]) + p[3];
}

// A block's dg sums in its shared-memory header, after G: two parts per row and column tile
// (kdk_r and q_r.dq_r - k_r.dk_r), one per warp (<h_c, dh_c>).
struct GradSumParts {
  float* kdk;
  float* terms;
  float* state;
  __device__ explicit GradSumParts(float* after_g)
      : kdk(after_g), terms(after_g + kBT * kColumnTiles), state(terms + kBT * kColumnTiles) {}
};

__device__ inline float TileAt(const bf16* t, int r, int col) {
  return ToFloat(t[r * kLdBf16 + col]);
}

// The end of one K slice's dq and dk, their sums over V done and dP stored to shared memory
// (before_dp() orders those stores before its products, where the caller has not yet): the rows
// decayed, dq += dP K, dk += dP^T Q, and, with kGateGrad, the slice's dg sums' parts.
template <bool kGateGrad, typename BeforeDp>
__device__ inline void FinishSliceGrads(tile::Acc64& dq, tile::Acc64& dk, float state_dot,
                                        const float* G, float scale, const bf16* dP, const bf16* xq,
                                        const bf16* xk, const GradSumParts& sums,
                                        BeforeDp before_dp) {
  dq.Transform([&](int r, int, float x) { return x * scale * exp2f(G[r]); });
  const float g_last = G[kBT - 1];
  dk.Transform([&](int r, int, float x) { return x * exp2f(g_last - G[r]); });
  if constexpr (kGateGrad) {
    StoreRowSumParts(sums.kdk, [&](int r, int col, int i, int e) {
      return TileAt(xk, r, col) * dk.part[i].x[e];
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
    StoreRowSumParts(sums.terms, [&](int r, int col, int i, int e) {
      return TileAt(xq, r, col) * dq.part[i].x[e] - TileAt(xk, r, col) * dk.part[i].x[e];
    });
    state_dot = WarpSum(state_dot);
    if (threadIdx.x % 32 == 0) sums.state[threadIdx.x / 32] = state_dot;
  }
}

// One K slice's dg sums from their parts (after a barrier) into `part`, kPartStride floats.
__device__ inline void StoreSliceGradParts(float* part, const GradSumParts& sums, float g_last) {
  if (threadIdx.x < kBT) {
    part[kPartKdk + threadIdx.x] = RowSum(sums.kdk, threadIdx.x);
    part[kPartTerms + threadIdx.x] = RowSum(sums.terms, threadIdx.x);
  }
  if (threadIdx.x == 0) {
    float state_sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) state_sum += sums.state[w];
    part[kPartState] = state_sum * exp2f(g_last);
  }
}

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
  const Chunk c = LocateChunk(p, BlockChunk(ks));
  const int h = blockIdx.y, k0 = BlockSlice(ks) * kBK;
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
    if constexpr (kGateGrad) {
      ForBlockItems<kThreads, kBK * kBK>([&](int idx) {
        const int r = idx / kBK, col = idx % kBK;
        state_dot += TileAt(hs(j), r, col) * TileAt(dhs(j), r, col);
      });
    }
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

// dq, dk and the dg sums with one block per (chunk, head), for V <= kChunkGradMaxV: d_o and v of
// every V slice stay in shared memory, so dP = scale tril(dO V^T) 2^(G_i - G_j) is computed and
// d_o and v are copied once per chunk, where HeadGradQKKernel's K-slice blocks each do both. The
// K slices follow one another: the state tiles (h_c and dh_c) of step s = (K slice s / (V/64), V
// slice s % (V/64)) stream through two stages, and q and k of the next K slice are copied once
// the products of this one are done with them. The dg sums go to `parts` per K slice, as
// HeadGradQKKernel's do. V = 128: 11 tiles (104 KB), two blocks per SM.
constexpr int kChunkGradMaxV = 128;
inline size_t HeadChunkGradQKSmemBytes(int v_dim) {
  return kGradHeaderBytes + (2 * (v_dim / kBK) + 7) * kTileElems * sizeof(bf16);
}

template <bool kGateGrad>
__global__ void __launch_bounds__(kThreads, 2)
    HeadChunkGradQKKernel(ChunkGatedParams p, const bf16* states, const bf16* d_states,
                          float* parts) {
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
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y;
  const auto issue = [&](int s) {  // one group per step, empty past the last
    if (s < steps) {
      const int k0 = s / vs * kBK, v0 = s % vs * kBK;
      AsyncStateTile(hs(s), states, p, c.global, h, k0, v0);
      AsyncStateTile(dhs(s), d_states, p, c.global, h, k0, v0);
    }
    __pipeline_commit();
  };
  const auto issue_qk = [&](int kk) {
    AsyncRows(xq, p.q, p.qk_strides, c, h, kk * kBK);
    AsyncRows(xk, p.k, p.qk_strides, c, h, kk * kBK);
  };

  GateRegs<Gate::kHead> gate;  // the gate's load first, so that it overlaps the copies' issue
  FetchGate<Gate::kHead>(gate, p, c, h, 0);
  for (int j = 0; j < vs; ++j) {
    AsyncRows(xo(j), p.d_o, p.v_strides, c, h, j * kBK);
    AsyncRows(xv(j), p.v, p.v_strides, c, h, j * kBK);
  }
  issue_qk(0);
  issue(0);  // the first group: d_o, v, q and k of K slice 0, and step 0
  issue(1);
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
  bool qk_newest = false;  // the latest group is the next K slice's q and k, not a step's states
  for (int s = 0; s < steps; ++s) {
    const int kk = s / vs, j = s % vs;
    if (s > 0) {
      if (qk_newest) {
        __pipeline_wait_prior(1);
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();  // step s's states are in; every warp is done with step s - 1's stage
      issue(s + 1);
      qk_newest = false;
    }
    // dO h_c^T and V dh_c^T (B(vv, kk) = h_c[kk][vv]), and <h_c, dh_c> for dg.
    tile::MmaBf16Acc64<true, false>(dq, kBK, xo(j), kLdBf16, hs(s), kLdBf16);
    tile::MmaBf16Acc64<true, false>(dk, kBK, xv(j), kLdBf16, dhs(s), kLdBf16);
    if constexpr (kGateGrad) {
      ForBlockItems<kThreads, kBK * kBK>([&](int idx) {
        const int r = idx / kBK, col = idx % kBK;
        state_dot += TileAt(hs(s), r, col) * TileAt(dhs(s), r, col);
      });
    }
    if (j + 1 < vs) continue;

    // K slice kk's sums over V are done: its rows decayed, then dP K and dP^T Q.
    __pipeline_wait_prior(1);  // q and k of this slice (all but the newest step's group)
    __syncthreads();           // ... and, the first time, dP
    FinishSliceGrads<kGateGrad>(dq, dk, state_dot, G, scale, dP, xq, xk, sums, [] {});
    __syncthreads();  // no warp reads this step's stage any more: it stages the results
    StoreAccRows(dq, hs(s), p.dq, p.qk_strides, c, h, kk * kBK);
    StoreAccRows(dk, dhs(s), p.dk, p.qk_strides, c, h, kk * kBK);
    if constexpr (kGateGrad) {
      StoreSliceGradParts(parts + ((int64_t{c.global} * p.heads + h) * ks + kk) * kPartStride, sums,
                          g_last);
    }
    if (kk + 1 < ks) {  // every warp is past its reads of q and k (StoreAccRows synchronised)
      issue_qk(kk + 1);
      __pipeline_commit();
      qk_newest = true;
    }
    dq.Zero();
    dk.Zero();
    state_dot = 0.0f;
  }
}

// dg of one (chunk, head) from the K slices' sums: 64 threads, one per row. (A template only so
// that the header defines it in each launcher's translation unit without a clash.)
template <Gate kGate>
__global__ void __launch_bounds__(kBT) HeadGateGradKernel(ChunkGatedParams p, const float* parts) {
  static_assert(kGate == Gate::kHead, "the channel gate's dg comes from ChannelGradQKKernel");
  __shared__ float kdk[kBT], terms[kBT];
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y, i = threadIdx.x, slices = p.k_dim / kBK;
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
