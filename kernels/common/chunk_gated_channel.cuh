// o, dv, dq, dk and dg of chunk_gla: the per-channel gate's intra-chunk kernels. Device code;
// included through chunk_gated.cuh.
//
// The off-diagonal 16 x 16 sub-blocks of the scores A (and of the dq / dk products) are
// re-referenced to a row n of the sub-chunk, (q 2^(G-G_n)) (k 2^(G_n-G))^T, so that neither
// factor can overflow; the diagonal sub-blocks are computed elementwise in fp32.
//   ChannelScoresKernel  grid (chunks, H), forward: P = scale tril(A) (bf16) into intra_scores,
//                        which the caller keeps for the backward, and the decayed operand
//                        X = q scale 2^G into the workspace; before the state pass also its
//                        operands, k 2^(G_last - G) and G_last
//   ChannelOutputKernel  grid (chunks x V/64, H): o = X h_c + P V, or dv = X dh_c + P^T dO
//   ChannelGradQKKernel  grid (chunks x K/64, H): dq, dk and dg of one K slice (the channel
//                        gate's dg is per key channel, so the slices are independent), and the
//                        slice of the backward's X = k 2^(G_last - G)
// Why the scores have their own kernel: they are the costly part (sub-chunk operands, the
// elementwise diagonal), and the output's V slices would each recompute them; written once,
// the output kernel has the head gate's shape (asynchronous copies, products in registers).
// The backward reads the forward's P rather than recomputing it, as fla keeps its A (recomputing
// it took 1.28 of the 8.0 ms forward + backward at (1,8192,96,128) on the H200).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_states.cuh"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// ----------------------------------------------------------------------------------------------
// Intra-chunk scores

// Row offset of sub-chunk s's operand block in a 96-row scratch (s = 1, 2, 3 hold 16, 32, 48
// rows): 0, 16, 48.
__device__ inline int SubBlockOffset(int s) { return 8 * s * (s - 1); }

// ksub, the 96-row scratch of k_j 2^(G_n - G_j) for j < n = 16 s, sub-chunk s = 1, 2, 3 at
// SubBlockOffset(s): the keys re-referenced to the first row of a later sub-chunk. (Row block m
// of ForRowPairs, rows [8 m, 8 m + 8), lies in sub-chunk 1 for m < 2, 2 for m < 6, else 3.)
__device__ inline void BuildKsub(bf16* ksub, const bf16* k, const float* G) {
  ForRowPairs<96>([&](int m, int r, int col) {
    const int s = m < 2 ? 1 : (m < 6 ? 2 : 3);
    const int j = r - SubBlockOffset(s), n = 16 * s;
    const float2 kj = LoadPair(k, j, col), gj = LoadPair(G, j, col), gn = LoadPair(G, n, col);
    StorePair(ksub, r, col, kj.x * Exp2(gn.x - gj.x), kj.y * Exp2(gn.y - gj.y));
  });
}

// The diagonal 16 x 16 blocks' lower-left 8 x 8 quadrants go by tensor cores too, re-referenced
// to the middle row m = n + 8 of sub-chunk n: (q_i 2^(G_i - G_m)) (k_j 2^(G_m - G_j)) for
// i >= m > j, both factors <= 1. Their operands, 64 rows of the scratch from row kQuadRows on:
// q8 (rows i = m .. m + 7 of sub-chunks 0-3, 32 rows) then k8 (rows j = n .. n + 7, 32 rows).
constexpr int kQuadRows = 160;
constexpr int kScoresScratchRows = kQuadRows + 64;

// A[i][j] (j <= i) += sum over this K slice of q_ik k_jk 2^(G_ik - G_jk). scratch:
// kScoresScratchRows rows. Starts and ends with the caller's barrier; the elementwise part and
// the products touch disjoint parts of A.
__device__ inline void AccumulateScores(float* A, const bf16* q, const bf16* k, const float* G,
                                        bf16* scratch) {
  bf16* qsub = scratch;                 // rows 16..63: q_i 2^(G_i - G_n), n = 16 * (i / 16)
  bf16* ksub = scratch + kBT * kLdBf16;  // 96 rows: k_j 2^(G_n - G_j), j < n = 16 s
  bf16* q8 = scratch + kQuadRows * kLdBf16;
  bf16* k8 = q8 + 32 * kLdBf16;
  ForRowPairs<kBT - 16>([&](int m, int r, int col) {
    const int i = 16 + r, n = 16 + 16 * (m / 2);
    const float2 qi = LoadPair(q, i, col), gi = LoadPair(G, i, col), gn = LoadPair(G, n, col);
    StorePair(qsub, i, col, qi.x * Exp2(gi.x - gn.x), qi.y * Exp2(gi.y - gn.y));
  });
  BuildKsub(ksub, k, G);
  // q8 and k8: row block m < 4 of ForRowPairs is q8, the rest k8; row r % 32 is row r % 8 of
  // sub-chunk r % 32 / 8.
  ForRowPairs<64>([&](int m, int r, int col) {
    const int rr = r % 32, mid = 16 * (rr / 8) + 8;
    const int x = m < 4 ? mid + rr % 8 : mid - 8 + rr % 8;  // row i (q8) or j (k8)
    const float2 gx = LoadPair(G, x, col), gm = LoadPair(G, mid, col);
    if (m < 4) {
      const float2 qx = LoadPair(q, x, col);
      StorePair(q8, rr, col, qx.x * Exp2(gx.x - gm.x), qx.y * Exp2(gx.y - gm.y));
    } else {
      const float2 kx = LoadPair(k, x, col);
      StorePair(k8, rr, col, kx.x * Exp2(gm.x - gx.x), kx.y * Exp2(gm.y - gx.y));
    }
  });
  // The rest of the diagonal blocks -- two 8 x 8 triangles per sub-chunk, rows i and columns j
  // in the same half -- elementwise in fp32. Warp w takes rows n + w (w + 1 pairs) and
  // n + 15 - w (8 - w pairs) of every sub-chunk: 9 for every warp, so no lane idles; lane l
  // sub-chunk l / 8 and the eight channels 8 (l % 8) .. + 7 (16-byte loads of k and G rows); the
  // eight lanes of a sub-chunk then add their channels up by shuffles. (One thread per 2 x 2 block
  // of pairs before: the threads above the diagonal idled, 56% of lanes busy. With the row-pair
  // operand builders, ChannelScoresKernel went from 1270 to 937 us at (1,8192,96,128), H200; the
  // whole 16 x 16 blocks elementwise were 17 pairs a warp.)
  {
    const int a = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n = lane / 8 * 16, c0 = lane % 8 * 8;
    const int i_lo = n + a, i_hi = n + 15 - a;
    float q_lo[8], q_hi[8], g_lo[8], g_hi[8];
    LoadEight(q, i_lo, c0, q_lo);
    LoadEight(q, i_hi, c0, q_hi);
    LoadEight(G, i_lo, c0, g_lo);
    LoadEight(G, i_hi, c0, g_hi);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      // j < 8: row i_lo's pairs (j <= a); j >= 8: row i_hi's (j <= 15 - a). a is the warp's:
      // every branch here is uniform.
      if (j < 8 ? j > a : j > 15 - a) continue;
      const float* qi = j < 8 ? q_lo : q_hi;
      const float* gi = j < 8 ? g_lo : g_hi;
      float kj[8], gj[8];
      LoadEight(k, n + j, c0, kj);
      LoadEight(G, n + j, c0, gj);
      float x = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) x += qi[e] * kj[e] * Exp2(gi[e] - gj[e]);
      // The eight lanes' partial sums, added up; lane j % 8 of the group adds the pair to A.
      x += __shfl_xor_sync(0xffffffffu, x, 1);
      x += __shfl_xor_sync(0xffffffffu, x, 2);
      x += __shfl_xor_sync(0xffffffffu, x, 4);
      if (lane % 8 == j % 8) A[(j < 8 ? i_lo : i_hi) * kLdF32 + n + j] += x;
    }
  }
  __syncthreads();
  // The off-diagonal 16 x 16 blocks (6 tiles: warps 0-5) ...
  for (int s = 1; s < 4; ++s) {
    Mma<true, false, kWarps>(16, 16 * s, kBK, qsub + 16 * s * kLdBf16, kLdBf16,
                             ksub + SubBlockOffset(s) * kLdBf16, kLdBf16, A + 16 * s * kLdF32,
                             kLdF32, true);
  }
  // ... and the quadrants, warps 6 and 7 two sub-chunks each: the 16 x 16 product of q8's and
  // k8's rows of sub-chunks 2p and 2p + 1, whose diagonal 8 x 8 blocks are their quadrants
  // (WarpAcc16: x[0..1] = C(g, 2t ..), x[6..7] = C(g + 8, 8 + 2t ..)).
  const int warp = threadIdx.x / 32;
  if (warp >= kWarps - 2) {
    const int pair = warp - (kWarps - 2), g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    tile::WarpAcc16 quad;
    quad.Zero();
    tile::MmaBf16Warp16<true, false>(quad, kBK, q8 + 16 * pair * kLdBf16, kLdBf16,
                                     k8 + 16 * pair * kLdBf16, kLdBf16);
#pragma unroll
    for (int sub = 0; sub < 2; ++sub) {  // sub-chunk 2 pair + sub
      const int n = 16 * (2 * pair + sub);
      float* at = A + (n + 8 + g) * kLdF32 + n + 2 * t;
      at[0] += quad.x[6 * sub];
      at[1] += quad.x[6 * sub + 1];
    }
  }
}

// Row offset of qsub's block for sub-chunk s (s = 0, 1, 2 hold rows i >= 16 s + 16: 48, 32, 16
// rows) in a 96-row scratch: 0, 48, 80.
__device__ inline int QsubOffset(int s) { return s == 0 ? 0 : (s == 1 ? 48 : 80); }

// Layout of the decayed operand (workspace): [chunks, H, 64, K] bf16.
inline size_t DecayedBytes(const ChunkGatedParams& p, int chunks) {
  return static_cast<size_t>(chunks) * p.heads * kBT * p.k_dim * sizeof(bf16);
}
__device__ inline int64_t DecayedOffset(const ChunkGatedParams& p, int global, int h, int row) {
  return ((int64_t{global} * p.heads + h) * kBT + row) * p.k_dim;
}

struct ScoresSmem {
  alignas(128) float A[kBT * kLdF32];        // 17408 B: scores
  alignas(128) float G[kBT * kLdF32];        // 17408 B: gate cumsum
  alignas(128) bf16 q[kBT * kLdBf16];        // 9216 B
  alignas(128) bf16 k[kBT * kLdBf16];        // 9216 B
  alignas(128) bf16 scratch[kScoresScratchRows * kLdBf16];  // 32256 B: sub-chunk operands
};  // 85 KB: two blocks per SM

// dst[e] = f(e) for e = 0 .. 7, as one 16-byte store (dst 16-byte aligned).
template <typename F>
__device__ inline void StoreEight(bf16* dst, F f) {
  alignas(16) __nv_bfloat162 packed[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) packed[e] = __floats2bfloat162_rn(f(2 * e), f(2 * e + 1));
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(packed);
}

// Writes K slice [k0, k0 + 64) of the decayed operand X from the slice's tile t (q or k) and
// gate cumsum G: forward (kGradV false) X = q scale 2^G, backward X = k 2^(G_last - G).
template <bool kGradV>
__device__ inline void StoreDecayedSlice(bf16* decayed, const ChunkGatedParams& p, const Chunk& c,
                                         int h, int k0, const bf16* t, const float* G) {
  ForBlockItems<kThreads, kBT * 8>([&](int idx) {
    const int r = idx / 8, c0 = idx % 8 * 8;
    StoreEight(decayed + DecayedOffset(p, c.global, h, r) + k0 + c0, [&](int e) {
      const int col = c0 + e;
      const float g = G[r * kLdF32 + col];
      const float x = ToFloat(t[r * kLdBf16 + col]);
      return kGradV ? x * Exp2(G[(kBT - 1) * kLdF32 + col] - g) : x * p.scale * Exp2(g);
    });
  });
}

// One (chunk, head) per block: the scores summed over the K slices (synchronous loads; the
// slice's decayed queries written as it goes), then P. Where the states go by the state pass
// (pass_keys not null) the block also writes the pass's operands from the tiles it holds: the
// decayed keys k 2^(G_last - G) into pass_keys and G_last per key channel into decays (what
// ChunkDecayKernel writes for the backward; measured 158 us for that kernel alone at
// (8,4096,8,256) on the H200). (The slice's q, k and gate loads in flight together, by cp.async,
// measured 5% slower: 980 against 936 us at (1,8192,96,128) on the H200.)
// (A template only so that the header defines it in each launcher's translation unit without a
// clash.)
template <Gate kGate>
__global__ void __launch_bounds__(kThreads)
    ChannelScoresKernel(ChunkGatedParams p, bf16* scores, bf16* decayed, bf16* pass_keys,
                        float* decays) {
  static_assert(kGate == Gate::kChannel, "the head gate's scores are HeadOutputKernel's");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  ScoresSmem& s = *reinterpret_cast<ScoresSmem*>(smem_raw);
  const Chunk c = LocateChunk(p, BlockChunk(p.heads));
  const int h = BlockHead(p.heads);
  for (int idx = threadIdx.x; idx < kBT * kLdF32; idx += kThreads) s.A[idx] = 0.0f;
  for (int k0 = 0; k0 < p.k_dim; k0 += kBK) {
    __syncthreads();
    LoadRows(s.q, p.q, p.qk_strides, c, h, k0);
    LoadRows(s.k, p.k, p.qk_strides, c, h, k0);
    LoadChannelGate(s.G, p, c, h, k0);  // synchronises
    AccumulateScores(s.A, s.q, s.k, s.G, s.scratch);
    StoreDecayedSlice<false>(decayed, p, c, h, k0, s.q, s.G);
    if (pass_keys != nullptr) {
      StoreDecayedSlice<true>(pass_keys, p, c, h, k0, s.k, s.G);
      if (threadIdx.x < kBK) {
        decays[DecayOffset(p, c.global, h, k0 + threadIdx.x)] =
            s.G[(kBT - 1) * kLdF32 + threadIdx.x];
      }
    }
  }
  __syncthreads();
  ForBlockItems<kThreads, kBT * 8>([&](int idx) {
    const int i = idx / 8, j0 = idx % 8 * 8;
    StoreEight(scores + ScoresOffset(p, c.global, h) + i * kBT + j0, [&](int e) {
      const int j = j0 + e;
      return j <= i ? s.A[i * kLdF32 + j] * p.scale : 0.0f;
    });
  });
}

// Dynamic shared memory of ChannelOutputKernel: X (K/64 slices), the K/64 state tiles of the V
// slice, the right-hand tile, P. K = 128: 6 tiles, 55 KB.
inline size_t ChannelOutputSmemBytes(int k_dim) {
  return static_cast<size_t>(2 * (k_dim / kBK) + 2) * kTileElems * sizeof(bf16);
}

// forward:  o[:, v]  = X h_c[:, v] + P V[:, v]      (X = q scale 2^G)
// backward: dv[:, v] = X dh_c[:, v] + P^T dO[:, v]  (X = k 2^(G_last - G))
template <bool kGradV>
__global__ void __launch_bounds__(kThreads) ChannelOutputKernel(ChunkGatedParams p,
                                                                const bf16* states,
                                                                const bf16* scores,
                                                                const bf16* decayed) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int slices = p.k_dim / kBK;
  bf16* x = reinterpret_cast<bf16*>(smem_raw);  // slice kk at kk * kTileElems
  bf16* st = x + slices * kTileElems;
  bf16* rhs = st + slices * kTileElems;
  bf16* P = rhs + kTileElems;
  const int vs = p.v_dim / kBK;
  const Chunk c = LocateChunk(p, BlockChunk(p.heads, vs));
  const int h = BlockHead(p.heads, vs), v0 = BlockSlice(vs) * kBK;
  for (int kk = 0; kk < slices; ++kk) {
    AsyncBlock(x + kk * kTileElems, decayed + DecayedOffset(p, c.global, h, 0) + kk * kBK,
               p.k_dim);
    AsyncStateTile(st + kk * kTileElems, states, p, c.global, h, kk * kBK, v0);
  }
  AsyncRows(rhs, kGradV ? p.d_o : p.v, p.v_strides, c, h, v0);
  AsyncBlock(P, scores + ScoresOffset(p, c.global, h), kBT);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  tile::Acc64 acc;
  acc.Zero();
  for (int kk = 0; kk < slices; ++kk) {
    tile::MmaBf16Acc64<true, true>(acc, kBK, x + kk * kTileElems, kLdBf16, st + kk * kTileElems,
                                   kLdBf16);
  }
  tile::MmaBf16Acc64<!kGradV, true>(acc, kBT, P, kLdBf16, rhs, kLdBf16);
  __syncthreads();  // every warp is done with X: its first tile stages the result
  StoreAccRows(acc, x, kGradV ? p.dv : p.o, p.v_strides, c, h, v0);
}

// ----------------------------------------------------------------------------------------------
// dq, dk, dg
//
// Per chunk c and key channel, with dk = dk_inter + dk_intra:
//   dg_t = R_c + sum_{s < t} k_s dk_inter_s + sum_{s >= t} (q_s dq_s - k_s dk_intra_s),
//   R_c = 2^G_last * rowsum(dh_c * h_c)        (h_c: the state entering the chunk)
// which is the sequence-wide reverse cumsum of (q dq - k dk) rewritten per chunk. This form has
// no cancellation between large terms: taking R from the state leaving the chunk instead cancels
// against k dk_inter only up to bf16 rounding, which swamps dg when decays are strong (dg ~ 0).

// ksub (96 rows, BuildKsub);
// qsub (96 rows): q_i 2^(G_i - G_n'), n' = 16 s + 15, for i > n', s = 0, 1, 2 at QsubOffset(s)
// (row block m in s = 0 for m < 6, 1 for m < 10, else 2).
__device__ inline void BuildSubChunkOperands(bf16* ksub, bf16* qsub, const bf16* q, const bf16* k,
                                             const float* G) {
  BuildKsub(ksub, k, G);
  ForRowPairs<96>([&](int m, int r, int col) {
    const int sq = m < 6 ? 0 : (m < 10 ? 1 : 2);
    const int i = 16 * sq + 16 + r - QsubOffset(sq), nq = 16 * sq + 15;
    const float2 qi = LoadPair(q, i, col), gi = LoadPair(G, i, col), gn = LoadPair(G, nq, col);
    StorePair(qsub, r, col, qi.x * Exp2(gi.x - gn.x), qi.y * Exp2(gi.y - gn.y));
  });
}

// The diagonal 16 x 16 blocks of dq and dk, elementwise in fp32 (the sub-chunk trick would need
// factors that can overflow there): for i, j in one sub-chunk, j <= i, and each key channel,
//   dq_i += dA_ij k_j 2^(G_i - G_j),   dk_j += dA_ij q_i 2^(G_i - G_j),
// into fp32 tiles diag_q and diag_k. Thread t takes sub-chunk t / 64 and channel t % 64 with its
// 16 rows of k and dk in registers, so each decay serves both sums, every lane does the same 136
// (i, j) pairs, and dA_ij is one broadcast load per warp. (Each thread took a 16-row tile's
// elements before: loops of 1 to 16 steps by row, half the lanes idle on average, and two
// exponentials per pair. With the row-pair operand builders, ChannelGradQKKernel went from 2877
// to 1810 us at (1,8192,96,128) on the H200.)
// The decays 2^(G_i - G_j) of row i are row i - 1's times the step 2^(G_i - G_{i-1}) (<= 1, so
// they can only shrink towards zero): one exponential per row instead of one per pair, which
// took 34816 of the block's ~68000 (quarter-rate) exponentials.
__device__ inline void DiagonalGrads(float* diag_q, float* diag_k, const float* dA, const bf16* q,
                                     const bf16* k, const float* G) {
  const int n = threadIdx.x / 64 * 16, col = threadIdx.x % 64;
  float kj[16], dk[16], decay[16];  // decay[j] = 2^(G_i - G_j) for the row i in hand
#pragma unroll
  for (int a = 0; a < 16; ++a) {
    kj[a] = ToFloat(k[(n + a) * kLdBf16 + col]);
    dk[a] = 0.0f;
  }
  float g_prev = G[n * kLdF32 + col];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (i > 0) {
      const float g = G[(n + i) * kLdF32 + col], step = Exp2(g - g_prev);
      g_prev = g;
#pragma unroll
      for (int j = 0; j < i; ++j) decay[j] *= step;
    }
    decay[i] = 1.0f;
    const float qi = ToFloat(q[(n + i) * kLdBf16 + col]);
    float dq = 0.0f;
#pragma unroll
    for (int j = 0; j <= i; ++j) {
      const float d = dA[(n + i) * kLdF32 + n + j] * decay[j];
      dq += d * kj[j];
      dk[j] += d * qi;
    }
    diag_q[(n + i) * kLdF32 + col] = dq;
  }
#pragma unroll
  for (int a = 0; a < 16; ++a) diag_k[(n + a) * kLdF32 + col] = dk[a];
}

// The V slices stream through two stages (d_o, v, h_c and dh_c: four bf16 tiles each), which
// later steps reuse: stage 0 takes the sub-chunk operands (192 bf16 rows), then the diagonal
// blocks' sums (two fp32 tiles), whose places the dg terms and k dk_inter take; stage 1 takes
// dA = scale tril(dO V^T) in fp32 (the diagonal blocks) and in bf16 (the off-diagonal products).
// (One stage before: each V slice's copies waited for the previous slice's products.)
constexpr size_t kGradStageBytes = 4 * kTileElems * sizeof(bf16);  // 36864 B
struct ChannelGradSmem {
  alignas(128) float G[kBT * kLdF32];  // 17408 B: gate cumsum of this K slice
  alignas(128) bf16 q[kBT * kLdBf16];  // 9216 B
  alignas(128) bf16 k[kBT * kLdBf16];  // 9216 B
  alignas(128) unsigned char stage[2][kGradStageBytes];
  float R[kBK];                 // rowsum(dh_c * h_c) per key channel of the slice
  float quarter_kdk[4][kBK];    // sums of k dk_inter over rows 16 q .. 16 q + 15
  float quarter_terms[4][kBK];  // sums of the dg terms over the same rows

  __device__ bf16* Tiles(int j) { return reinterpret_cast<bf16*>(stage[j % 2]); }
  __device__ float* dA() { return reinterpret_cast<float*>(stage[1]); }
  __device__ bf16* dAb() {
    return reinterpret_cast<bf16*>(stage[1] + kBT * kLdF32 * sizeof(float));
  }
};  // 109 KB: two blocks per SM
static_assert(2 * kBT * kLdF32 * sizeof(float) <= kGradStageBytes, "dg tiles fit");
static_assert(192 * kLdBf16 * sizeof(bf16) <= kGradStageBytes, "sub-chunk rows fit");
static_assert(kBT * (kLdF32 * sizeof(float) + kLdBf16 * sizeof(bf16)) <= kGradStageBytes,
              "dA fits");
static_assert(2 * (sizeof(ChannelGradSmem) + 1024) <= 228 * 1024, "two blocks per SM");

template <Gate kGate>
__global__ void __launch_bounds__(kThreads, 2) ChannelGradQKKernel(ChunkGatedParams p,
                                                                   const bf16* states,
                                                                   const bf16* d_states,
                                                                   bf16* decayed) {
  static_assert(kGate == Gate::kChannel, "the head gate's is HeadGradQKKernel");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  ChannelGradSmem& s = *reinterpret_cast<ChannelGradSmem*>(smem_raw);
  // V slice j's tiles in stage j % 2: d_o, v, and the h_c and dh_c rows of this K slice.
  const auto xo = [&](int j) { return s.Tiles(j); };
  const auto xv = [&](int j) { return s.Tiles(j) + kTileElems; };
  const auto hs = [&](int j) { return s.Tiles(j) + 2 * kTileElems; };
  const auto dhs = [&](int j) { return s.Tiles(j) + 3 * kTileElems; };
  const int ks = p.k_dim / kBK, vs = p.v_dim / kBK;
  const Chunk c = LocateChunk(p, BlockChunk(p.heads, ks));
  const int h = BlockHead(p.heads, ks), k0 = BlockSlice(ks) * kBK;
  const auto issue = [&](int j) { AsyncGradSlice(xo(j), p, c, h, k0, j, states, d_states); };
  // The gate's loads first: the copies' address arithmetic then overlaps them (issued last, the
  // block waited on them by themselves).
  GateRegs<kGate> gate;
  FetchGate<kGate>(gate, p, c, h, k0);
  AsyncRows(s.q, p.q, p.qk_strides, c, h, k0);
  AsyncRows(s.k, p.k, p.qk_strides, c, h, k0);
  issue(0);
  __pipeline_commit();
  if (vs > 1) issue(1);
  __pipeline_commit();
  if (threadIdx.x < kBK) s.R[threadIdx.x] = 0.0f;
  CommitGate<kGate>(s.G, gate);  // synchronises

  // Over the V slices: dA = dO V^T, dq_inter = dO h_c^T, dk_inter = V dh_c^T (B(vv, x) = t[x][vv],
  // the column-major view of each tile), and R from the same state tiles (4 threads per row).
  tile::Acc64 dA, dq, dk;
  dA.Zero();
  dq.Zero();
  dk.Zero();
  StreamSlices(vs, issue, [&](int j) {
    tile::MmaBf16Acc64<true, false>(dA, kBK, xo(j), kLdBf16, xv(j), kLdBf16);
    tile::MmaBf16Acc64<true, false>(dq, kBK, xo(j), kLdBf16, hs(j), kLdBf16);
    tile::MmaBf16Acc64<true, false>(dk, kBK, xv(j), kLdBf16, dhs(j), kLdBf16);
    const int r = threadIdx.x / 4, part = threadIdx.x % 4;
    float acc = 0.0f;
#pragma unroll
    for (int c0 = part * 16; c0 < part * 16 + 16; c0 += 8) {
      float x[8], y[8];
      LoadEight(hs(j), r, c0, x);
      LoadEight(dhs(j), r, c0, y);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc += x[e] * y[e];
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    if (part == 0) s.R[r] += acc;
  });
  __syncthreads();  // every warp is done with the stages: dA and the sub-chunk operands take them
  const float scale = p.scale;
  auto g = [&](int r, int col) { return s.G[r * kLdF32 + col]; };
  dA.Transform([&](int r, int col, float x) { return col <= r ? x * scale : 0.0f; });
  dA.Store(s.dA(), kLdF32);
  dA.StoreBf16(s.dAb(), kLdBf16);
  dq.Transform([&](int r, int col, float x) { return x * scale * Exp2(g(r, col)); });
  dk.Transform([&](int r, int col, float x) { return x * Exp2(g(kBT - 1, col) - g(r, col)); });
  const tile::Acc64 dk_inter = dk;
  // dv's operand (ChannelOutputKernel), unless the state pass's ChunkDecayKernel wrote it (the
  // same keys, up to the rounding of the gate's cumsum).
  if (decayed != nullptr) StoreDecayedSlice<true>(decayed, p, c, h, k0, s.k, s.G);
  bf16* ksub = s.Tiles(0);
  bf16* qsub = ksub + 96 * kLdBf16;
  BuildSubChunkOperands(ksub, qsub, s.q, s.k, s.G);
  __syncthreads();  // dA, dAb and the operands are in

  // Off-diagonal sub-blocks of the intra-chunk parts on tensor cores, per 16-row tile of the warp
  // (sub-chunk sb, reference rows n and last):
  //   dq_i += 2^(G_i - G_n) sum_{j < n} dA_ij ksub_j
  //   dk_j += 2^(G_last - G_j) sum_{i > last} dA_ij qsub_i
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int sb = tile::Acc64::Row(i) / 16, n = 16 * sb, last = n + 15;
    const int col0 = tile::Acc64::Col();
    tile::WarpAcc16 off_q, off_k;
    off_q.Zero();
    off_k.Zero();
    if (sb >= 1) {
      tile::MmaBf16Warp16<true, true>(off_q, n, s.dAb() + n * kLdBf16, kLdBf16,
                                      ksub + SubBlockOffset(sb) * kLdBf16 + col0, kLdBf16);
    }
    if (sb <= 2) {  // A(j, i) = dA[i][j]: the column-major view
      tile::MmaBf16Warp16<false, true>(off_k, kBT - last - 1, s.dAb() + (last + 1) * kLdBf16 + n,
                                       kLdBf16, qsub + QsubOffset(sb) * kLdBf16 + col0, kLdBf16);
    }
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const int r = tile::Acc64::ElementRow(i, e), col = tile::Acc64::ElementCol(e);
      const float2 gr = LoadPair(s.G, r, col);
      if (sb >= 1) {
        const float2 gn = LoadPair(s.G, n, col);
        dq.part[i].x[e] += Exp2(gr.x - gn.x) * off_q.x[e];
        dq.part[i].x[e + 1] += Exp2(gr.y - gn.y) * off_q.x[e + 1];
      }
      if (sb <= 2) {
        const float2 gl = LoadPair(s.G, last, col);
        dk.part[i].x[e] += Exp2(gl.x - gr.x) * off_k.x[e];
        dk.part[i].x[e + 1] += Exp2(gl.y - gr.y) * off_k.x[e + 1];
      }
    }
  }
  __syncthreads();  // the sub-chunk operands are read: the diagonal blocks' sums take their place
  float* diag_q = reinterpret_cast<float*>(s.stage[0]);
  float* diag_k = diag_q + kBT * kLdF32;
  DiagonalGrads(diag_q, diag_k, s.dA(), s.q, s.k, s.G);
  __syncthreads();

  // The diagonal sums join dq and dk; then the dg terms per element: q dq - k dk + k dk_inter
  // (the s >= t part), and k dk_inter. Their tiles take the diagonal tiles' place: each thread
  // reads and then writes the same elements (its accumulator positions).
  float* kdk = diag_q;
  float* terms = diag_k;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int r = tile::Acc64::ElementRow(i, e), col = tile::Acc64::ElementCol(e);
      dq.part[i].x[e] += diag_q[r * kLdF32 + col];
      dk.part[i].x[e] += diag_k[r * kLdF32 + col];
      const float qv = ToFloat(s.q[r * kLdBf16 + col]), kv = ToFloat(s.k[r * kLdBf16 + col]);
      const float kd = kv * dk_inter.part[i].x[e];
      kdk[r * kLdF32 + col] = kd;
      terms[r * kLdF32 + col] = qv * dq.part[i].x[e] - kv * dk.part[i].x[e] + kd;
    }
  }
  __syncthreads();  // q and k are read: they stage dq and dk
  StoreAccRows(dq, s.q, p.dq, p.qk_strides, c, h, k0);
  StoreAccRows(dk, s.k, p.dk, p.qk_strides, c, h, k0);

  // Per column: the exclusive prefix of k dk_inter and the inclusive suffix of the terms. Four
  // threads per column, 16 rows each in registers; the quarters' sums join through shared
  // memory. (Two threads per column walking 32 rows in shared memory left half the block idle
  // behind a chain of dependent loads.)
  const int col = threadIdx.x % kBK, quarter = threadIdx.x / kBK, r0 = 16 * quarter;
  float prefix[16], suffix[16];
#pragma unroll
  for (int a = 0; a < 16; ++a) {
    prefix[a] = kdk[(r0 + a) * kLdF32 + col];
    suffix[a] = terms[(r0 + a) * kLdF32 + col];
  }
  float kdk_sum = 0.0f, term_sum = 0.0f;
#pragma unroll
  for (int a = 0; a < 16; ++a) {
    const float x = prefix[a];
    prefix[a] = kdk_sum;
    kdk_sum += x;
  }
#pragma unroll
  for (int a = 15; a >= 0; --a) {
    term_sum += suffix[a];
    suffix[a] = term_sum;
  }
  s.quarter_kdk[quarter][col] = kdk_sum;
  s.quarter_terms[quarter][col] = term_sum;
  __syncthreads();
  if (p.dg == nullptr) return;
  float base = s.R[col] * exp2f(g(kBT - 1, col));
#pragma unroll
  for (int other = 0; other < 4; ++other) {
    if (other < quarter) base += s.quarter_kdk[other][col];
    if (other > quarter) base += s.quarter_terms[other][col];
  }
  float* dg = RowPtr(p.dg, p.g_strides, c.batch, c.t0 + r0, h) + k0 + col;
#pragma unroll
  for (int a = 0; a < 16; ++a) {
    if (r0 + a < c.rows) dg[a * p.g_strides.token] = base + prefix[a] + suffix[a];
  }
}

}  // namespace flame::kernels::gated_chunk
