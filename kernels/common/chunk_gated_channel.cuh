// o, dv, dq, dk and dg of chunk_gla: the per-channel gate's intra-chunk kernels. Device code;
// included through chunk_gated.cuh.
//
// The off-diagonal 16 x 16 sub-blocks of the scores A (and of the dq / dk products) are
// re-referenced to a row n of the sub-chunk, (q 2^(G-G_n)) (k 2^(G_n-G))^T, so that neither
// factor can overflow; the diagonal sub-blocks are computed elementwise in fp32.
//   ChannelScoresKernel  grid (chunks, H): P = scale tril(A) (bf16) and the decayed operand X
//                        (forward q scale 2^G, backward k 2^(G_last - G)) into the workspace
//   ChannelOutputKernel  grid (chunks, H, V/64): o = X h_c + P V, or dv = X dh_c + P^T dO
//   ChannelGradQKKernel  grid (chunks, H, K/64): dq, dk and dg of one K slice (the channel
//                        gate's dg is per key channel, so the slices are independent)
// Why the scores have their own kernel: they are the costly part (sub-chunk operands, the
// elementwise diagonal), and the output's V slices would each recompute them; written once,
// the output kernel has the head gate's shape (asynchronous copies, products in registers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// ----------------------------------------------------------------------------------------------
// Intra-chunk scores

// Row offset of sub-chunk s's operand block in a 96-row scratch (s = 1, 2, 3 hold 16, 32, 48
// rows): 0, 16, 48.
__device__ inline int SubBlockOffset(int s) { return 8 * s * (s - 1); }

// Element (r, col) of ksub, the 96-row scratch of k_j 2^(G_n - G_j) for j < n = 16 s, sub-chunk
// s = 1, 2, 3 at SubBlockOffset(s): the keys re-referenced to the first row of a later sub-chunk.
__device__ inline bf16 KsubElement(const bf16* k, const float* G, int r, int col) {
  const int s = r < 16 ? 1 : (r < 48 ? 2 : 3);
  const int j = r - SubBlockOffset(s), n = 16 * s;
  return __float2bfloat16(ToFloat(k[j * kLdBf16 + col]) *
                          exp2f(G[n * kLdF32 + col] - G[j * kLdF32 + col]));
}

// A[i][j] (j <= i) += sum over this K slice of q_ik k_jk 2^(G_ik - G_jk). scratch: 160 rows.
// Starts and ends with the caller's barrier; the elementwise part and the products touch
// disjoint blocks of A.
__device__ inline void AccumulateScores(float* A, const bf16* q, const bf16* k, const float* G,
                                        bf16* scratch) {
  bf16* qsub = scratch;                 // rows 16..63: q_i 2^(G_i - G_n), n = 16 * (i / 16)
  bf16* ksub = scratch + kBT * kLdBf16;  // 96 rows: k_j 2^(G_n - G_j), j < n = 16 s
  for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
    const int i = idx / kBK, c = idx % kBK;
    if (i >= 16) {
      const int n = i & ~15;
      qsub[i * kLdBf16 + c] = __float2bfloat16(
          ToFloat(q[i * kLdBf16 + c]) * exp2f(G[i * kLdF32 + c] - G[n * kLdF32 + c]));
    }
  }
  for (int idx = threadIdx.x; idx < 96 * kBK; idx += kThreads) {
    const int r = idx / kBK, c = idx % kBK;
    ksub[r * kLdBf16 + c] = KsubElement(k, G, r, c);
  }
  // Diagonal 16 x 16 blocks, elementwise in fp32. Thread t takes rows i0, i0 + 1 and columns
  // j0, j0 + 1 of sub-chunk t / 64 and two channels per step, so that one 4- or 8-byte shared
  // load serves four products (one scalar load per product before: the loop was most of this
  // kernel's instructions). Blocks wholly above the diagonal are skipped; the pair above it in a
  // diagonal 2 x 2 block is computed (its exponent may overflow) and not stored.
  {
    const int n = threadIdx.x / 64 * 16, a = threadIdx.x % 64 / 8, b = threadIdx.x % 8;
    if (b <= a) {
      const int i0 = n + 2 * a, j0 = n + 2 * b;
      float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
      for (int c = 0; c < kBK; c += 2) {
        float2 qi[2], gi[2], kj[2], gj[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          qi[u] = __bfloat1622float2(
              *reinterpret_cast<const __nv_bfloat162*>(q + (i0 + u) * kLdBf16 + c));
          kj[u] = __bfloat1622float2(
              *reinterpret_cast<const __nv_bfloat162*>(k + (j0 + u) * kLdBf16 + c));
          gi[u] = *reinterpret_cast<const float2*>(G + (i0 + u) * kLdF32 + c);
          gj[u] = *reinterpret_cast<const float2*>(G + (j0 + u) * kLdF32 + c);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
#pragma unroll
          for (int w = 0; w < 2; ++w) {
            acc[u][w] += qi[u].x * kj[w].x * exp2f(gi[u].x - gj[w].x) +
                         qi[u].y * kj[w].y * exp2f(gi[u].y - gj[w].y);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
#pragma unroll
        for (int w = 0; w < 2; ++w) {
          if (j0 + w <= i0 + u) A[(i0 + u) * kLdF32 + j0 + w] += acc[u][w];
        }
      }
    }
  }
  __syncthreads();
  for (int s = 1; s < 4; ++s) {
    Mma<true, false, kWarps>(16, 16 * s, kBK, qsub + 16 * s * kLdBf16, kLdBf16,
                             ksub + SubBlockOffset(s) * kLdBf16, kLdBf16, A + 16 * s * kLdF32,
                             kLdF32, true);
  }
}


// Row offset of qsub's block for sub-chunk s (s = 0, 1, 2 hold rows i >= 16 s + 16: 48, 32, 16
// rows) in a 96-row scratch: 0, 48, 80.
__device__ inline int QsubOffset(int s) { return s == 0 ? 0 : (s == 1 ? 48 : 80); }

// Workspace layout of the scores and the decayed operand: [chunks, H, 64, 64] and
// [chunks, H, 64, K] bf16.
inline size_t ScoresBytes(const ChunkGatedParams& p, int chunks) {
  return static_cast<size_t>(chunks) * p.heads * kBT * kBT * sizeof(bf16);
}
inline size_t DecayedBytes(const ChunkGatedParams& p, int chunks) {
  return static_cast<size_t>(chunks) * p.heads * kBT * p.k_dim * sizeof(bf16);
}
__device__ inline int64_t ScoresOffset(const ChunkGatedParams& p, int global, int h) {
  return (int64_t{global} * p.heads + h) * kBT * kBT;
}
__device__ inline int64_t DecayedOffset(const ChunkGatedParams& p, int global, int h, int row) {
  return ((int64_t{global} * p.heads + h) * kBT + row) * p.k_dim;
}

struct ScoresSmem {
  alignas(128) float A[kBT * kLdF32];        // 17408 B: scores
  alignas(128) float G[kBT * kLdF32];        // 17408 B: gate cumsum
  alignas(128) bf16 q[kBT * kLdBf16];        // 9216 B
  alignas(128) bf16 k[kBT * kLdBf16];        // 9216 B
  alignas(128) bf16 scratch[160 * kLdBf16];  // 23040 B: sub-chunk operands
};  // 76 KB

// dst[e] = f(e) for e = 0 .. 7, as one 16-byte store (dst 16-byte aligned).
template <typename F>
__device__ inline void StoreEight(bf16* dst, F f) {
  alignas(16) __nv_bfloat162 packed[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) packed[e] = __floats2bfloat162_rn(f(2 * e), f(2 * e + 1));
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(packed);
}

// One (chunk, head) per block: the scores summed over the K slices (synchronous loads; the
// slice's decayed operand written as it goes), then P.
template <bool kGradV>
__global__ void __launch_bounds__(kThreads) ChannelScoresKernel(ChunkGatedParams p, bf16* scores,
                                                                bf16* decayed) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  ScoresSmem& s = *reinterpret_cast<ScoresSmem*>(smem_raw);
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y;
  for (int idx = threadIdx.x; idx < kBT * kLdF32; idx += kThreads) s.A[idx] = 0.0f;
  for (int k0 = 0; k0 < p.k_dim; k0 += kBK) {
    __syncthreads();
    LoadRows(s.q, p.q, p.qk_strides, c, h, k0);
    LoadRows(s.k, p.k, p.qk_strides, c, h, k0);
    LoadChannelGate(s.G, p, c, h, k0);  // synchronises
    AccumulateScores(s.A, s.q, s.k, s.G, s.scratch);
    ForBlockItems<kThreads, kBT * 8>([&](int idx) {
      const int r = idx / 8, c0 = idx % 8 * 8;
      StoreEight(decayed + DecayedOffset(p, c.global, h, r) + k0 + c0, [&](int e) {
        const int col = c0 + e;
        const float g = s.G[r * kLdF32 + col];
        return kGradV ? ToFloat(s.k[r * kLdBf16 + col]) * exp2f(s.G[(kBT - 1) * kLdF32 + col] - g)
                      : ToFloat(s.q[r * kLdBf16 + col]) * p.scale * exp2f(g);
      });
    });
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

// Asynchronous copy of a 64 x 64 block of a row-major bf16 matrix with leading dimension ld.
__device__ inline void AsyncBlock(bf16* dst, const bf16* src, int64_t ld) {
  ForBlockItems<kThreads, kBT * 8>([&](int idx) {
    const int r = idx / 8, c8 = idx % 8;
    __pipeline_memcpy_async(dst + r * kLdBf16 + c8 * 8, src + r * ld + c8 * 8, 16);
  });
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
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y, v0 = blockIdx.z * kBK;
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

// ksub (96 rows, KsubElement);
// qsub (96 rows): q_i 2^(G_i - G_n'), n' = 16 s + 15, for i > n', s = 0, 1, 2 at QsubOffset(s).
__device__ inline void BuildSubChunkOperands(bf16* ksub, bf16* qsub, const bf16* q, const bf16* k,
                                             const float* G) {
  for (int idx = threadIdx.x; idx < 96 * kBK; idx += kThreads) {
    const int r = idx / kBK, col = idx % kBK;
    ksub[r * kLdBf16 + col] = KsubElement(k, G, r, col);
    const int sq = r < 48 ? 0 : (r < 80 ? 1 : 2);
    const int i = 16 * sq + 16 + r - QsubOffset(sq);
    const int nq = 16 * sq + 15;
    qsub[r * kLdBf16 + col] = __float2bfloat16(
        ToFloat(q[i * kLdBf16 + col]) * exp2f(G[i * kLdF32 + col] - G[nq * kLdF32 + col]));
  }
}

struct ChannelGradSmem {
  alignas(128) float G[kBT * kLdF32];    // 17408 B: gate cumsum of this K slice
  alignas(128) float dA[kBT * kLdF32];   // 17408 B: scale tril(dO V^T), fp32 (diagonal blocks)
  alignas(128) bf16 dAb[kBT * kLdBf16];  // 9216 B: the same in bf16 (off-diagonal products)
  alignas(128) bf16 q[kBT * kLdBf16];    // 9216 B
  alignas(128) bf16 k[kBT * kLdBf16];    // 9216 B
  // One V slice of d_o, v, h_c, dh_c (four bf16 tiles); then the sub-chunk operands (192 bf16
  // rows); then the dg terms and k dk_inter (two fp32 tiles).
  alignas(128) unsigned char work[4 * kTileElems * sizeof(bf16)];  // 36864 B
  float R[kBK];            // rowsum(dh_c * h_c) per key channel of the slice
  float prefix_half[kBK];  // sum of k dk_inter over rows 0..31
  float suffix_half[kBK];  // sum of dg terms over rows 32..63
};  // 100 KB: two blocks per SM
static_assert(2 * kBT * kLdF32 * sizeof(float) <= sizeof(ChannelGradSmem::work), "dg tiles fit");
static_assert(192 * kLdBf16 * sizeof(bf16) <= sizeof(ChannelGradSmem::work), "sub-chunk rows fit");

template <Gate kGate>
__global__ void __launch_bounds__(kThreads) ChannelGradQKKernel(ChunkGatedParams p,
                                                                const bf16* states,
                                                                const bf16* d_states) {
  static_assert(kGate == Gate::kChannel, "the head gate's is HeadGradQKKernel");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  ChannelGradSmem& s = *reinterpret_cast<ChannelGradSmem*>(smem_raw);
  bf16* tiles = reinterpret_cast<bf16*>(s.work);
  bf16* xo = tiles;                   // d_o, the current V slice
  bf16* xv = xo + kTileElems;         // v
  bf16* hs = xv + kTileElems;         // h_c rows of this K slice
  bf16* dhs = hs + kTileElems;        // dh_c
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y, k0 = blockIdx.z * kBK, vs = p.v_dim / kBK;
  auto issue_v_slice = [&](int j) {
    AsyncRows(xo, p.d_o, p.v_strides, c, h, j * kBK);
    AsyncRows(xv, p.v, p.v_strides, c, h, j * kBK);
    AsyncStateTile(hs, states, p, c.global, h, k0, j * kBK);
    AsyncStateTile(dhs, d_states, p, c.global, h, k0, j * kBK);
    __pipeline_commit();
  };
  AsyncRows(s.q, p.q, p.qk_strides, c, h, k0);
  AsyncRows(s.k, p.k, p.qk_strides, c, h, k0);
  issue_v_slice(0);
  if (threadIdx.x < kBK) s.R[threadIdx.x] = 0.0f;
  LoadChannelGate(s.G, p, c, h, k0);  // overlaps the copies; synchronises

  // Over the V slices: dA = dO V^T, dq_inter = dO h_c^T, dk_inter = V dh_c^T (B(vv, x) = t[x][vv],
  // the column-major view of each tile), and R from the same state tiles (4 threads per row).
  tile::Acc64 dA, dq, dk;
  dA.Zero();
  dq.Zero();
  dk.Zero();
  for (int j = 0; j < vs; ++j) {
    if (j > 0) {
      __syncthreads();  // every warp is done with the previous slice's tiles
      issue_v_slice(j);
    }
    __pipeline_wait_prior(0);
    __syncthreads();
    tile::MmaBf16Acc64<true, false>(dA, kBK, xo, kLdBf16, xv, kLdBf16);
    tile::MmaBf16Acc64<true, false>(dq, kBK, xo, kLdBf16, hs, kLdBf16);
    tile::MmaBf16Acc64<true, false>(dk, kBK, xv, kLdBf16, dhs, kLdBf16);
    const int r = threadIdx.x / 4, part = threadIdx.x % 4;
    float acc = 0.0f;
#pragma unroll
    for (int col = part * 16; col < part * 16 + 16; ++col) {
      acc += ToFloat(dhs[r * kLdBf16 + col]) * ToFloat(hs[r * kLdBf16 + col]);
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    if (part == 0) s.R[r] += acc;
  }
  const float scale = p.scale;
  auto g = [&](int r, int col) { return s.G[r * kLdF32 + col]; };
  dA.Transform([&](int r, int col, float x) { return col <= r ? x * scale : 0.0f; });
  dA.Store(s.dA, kLdF32);
  dA.StoreBf16(s.dAb, kLdBf16);
  dq.Transform([&](int r, int col, float x) { return x * scale * exp2f(g(r, col)); });
  dk.Transform([&](int r, int col, float x) { return x * exp2f(g(kBT - 1, col) - g(r, col)); });
  const tile::Acc64 dk_inter = dk;
  __syncthreads();  // every warp is done with the V slice tiles: the sub-chunk operands take them
  bf16* ksub = tiles;
  bf16* qsub = tiles + 96 * kLdBf16;
  BuildSubChunkOperands(ksub, qsub, s.q, s.k, s.G);
  __syncthreads();  // dA, dAb and the operands are in

  // Intra-chunk parts, per 16-row tile of the warp (sub-chunk sb, reference rows n and last):
  //   dq_i += 2^(G_i - G_n) sum_{j < n} dA_ij ksub_j
  //           + sum_{n <= j <= i} dA_ij k_j 2^(G_i - G_j)
  //   dk_j += 2^(G_last - G_j) sum_{i > last} dA_ij qsub_i
  //           + sum_{j <= i <= last} dA_ij q_i 2^(G_i - G_j)
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int sb = tile::Acc64::Row(i) / 16, n = 16 * sb, last = n + 15;
    const int col0 = tile::Acc64::Col();
    tile::WarpAcc16 off_q, off_k;
    off_q.Zero();
    off_k.Zero();
    if (sb >= 1) {
      tile::MmaBf16Warp16<true, true>(off_q, n, s.dAb + n * kLdBf16, kLdBf16,
                                      ksub + SubBlockOffset(sb) * kLdBf16 + col0, kLdBf16);
    }
    if (sb <= 2) {  // A(j, i) = dA[i][j]: the column-major view
      tile::MmaBf16Warp16<false, true>(off_k, kBT - last - 1, s.dAb + (last + 1) * kLdBf16 + n,
                                       kLdBf16, qsub + QsubOffset(sb) * kLdBf16 + col0, kLdBf16);
    }
    // Elements e and e + 1 are adjacent columns of one row: one dA load and one 4- and one 8-byte
    // load of k (or q) and G serve both.
    auto pair = [](const bf16* t, int r, int col) {
      return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(t + r * kLdBf16 + col));
    };
    auto g2 = [&](int r, int col) {
      return *reinterpret_cast<const float2*>(s.G + r * kLdF32 + col);
    };
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const int r = tile::Acc64::ElementRow(i, e), col = tile::Acc64::ElementCol(e);
      const float2 gr = g2(r, col);
      float2 aq = make_float2(0.0f, 0.0f);
      if (sb >= 1) {
        const float2 gn = g2(n, col);
        aq = make_float2(exp2f(gr.x - gn.x) * off_q.x[e], exp2f(gr.y - gn.y) * off_q.x[e + 1]);
      }
      for (int jj = n; jj <= r; ++jj) {
        const float d = s.dA[r * kLdF32 + jj];
        const float2 kv = pair(s.k, jj, col), gj = g2(jj, col);
        aq.x += d * kv.x * exp2f(gr.x - gj.x);
        aq.y += d * kv.y * exp2f(gr.y - gj.y);
      }
      dq.part[i].x[e] += aq.x;
      dq.part[i].x[e + 1] += aq.y;
      float2 ak = make_float2(0.0f, 0.0f);
      if (sb <= 2) {
        const float2 gl = g2(last, col);
        ak = make_float2(exp2f(gl.x - gr.x) * off_k.x[e], exp2f(gl.y - gr.y) * off_k.x[e + 1]);
      }
      for (int ii = r; ii <= last; ++ii) {
        const float d = s.dA[ii * kLdF32 + r];
        const float2 qv = pair(s.q, ii, col), gi = g2(ii, col);
        ak.x += d * qv.x * exp2f(gi.x - gr.x);
        ak.y += d * qv.y * exp2f(gi.y - gr.y);
      }
      dk.part[i].x[e] += ak.x;
      dk.part[i].x[e + 1] += ak.y;
    }
  }
  __syncthreads();  // the sub-chunk operands are read: the dg tiles take their place

  // dg terms per element: q dq - k dk + k dk_inter (the s >= t part), and k dk_inter.
  float* kdk = reinterpret_cast<float*>(s.work);
  float* terms = kdk + kBT * kLdF32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int r = tile::Acc64::ElementRow(i, e), col = tile::Acc64::ElementCol(e);
      const float qv = ToFloat(s.q[r * kLdBf16 + col]), kv = ToFloat(s.k[r * kLdBf16 + col]);
      const float kd = kv * dk_inter.part[i].x[e];
      kdk[r * kLdF32 + col] = kd;
      terms[r * kLdF32 + col] = qv * dq.part[i].x[e] - kv * dk.part[i].x[e] + kd;
    }
  }
  __syncthreads();  // q and k are read: they stage dq and dk
  StoreAccRows(dq, s.q, p.dq, p.qk_strides, c, h, k0);
  StoreAccRows(dk, s.k, p.dk, p.qk_strides, c, h, k0);

  // Per column: exclusive prefix of k dk_inter, inclusive suffix of the terms; two threads per
  // column, 32 rows each, joined through prefix_half / suffix_half.
  const int col = threadIdx.x % kBK, half = threadIdx.x / kBK;
  if (half < 2) {
    float pre = 0.0f, suf = 0.0f;
    for (int i = half * 32; i < half * 32 + 32; ++i) {
      const float kd = kdk[i * kLdF32 + col];
      kdk[i * kLdF32 + col] = pre;
      pre += kd;
    }
    for (int i = half * 32 + 31; i >= half * 32; --i) {
      suf += terms[i * kLdF32 + col];
      terms[i * kLdF32 + col] = suf;
    }
    if (half == 0) {
      s.prefix_half[col] = pre;
    } else {
      s.suffix_half[col] = suf;
    }
  }
  __syncthreads();
  if (half < 2 && p.dg != nullptr) {
    const float base = s.R[col] * exp2f(g(kBT - 1, col)) +
                       (half == 1 ? s.prefix_half[col] : s.suffix_half[col]);
    for (int i = half * 32; i < min(half * 32 + 32, c.rows); ++i) {
      RowPtr(p.dg, p.g_strides, c.batch, c.t0 + i, h)[k0 + col] =
          base + kdk[i * kLdF32 + col] + terms[i * kLdF32 + col];
    }
  }
}

}  // namespace flame::kernels::gated_chunk
