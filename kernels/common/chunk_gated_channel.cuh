// o, dv, dq, dk and dg of chunk_gla: the per-channel gate's intra-chunk kernels. Device code;
// included through chunk_gated.cuh.
//
// The off-diagonal 16 x 16 sub-blocks of the scores A (and of the dq / dk products) are
// re-referenced to a row n of the sub-chunk, (q 2^(G-G_n)) (k 2^(G_n-G))^T, so that neither
// factor can overflow; the diagonal sub-blocks are computed elementwise in fp32.
//   ChunkOutputKernel    grid (chunks, H): o (forward) or dv (backward)
//   GradQKKernel         grid (chunks, H): dq, dk and dg
// Both run one block per chunk, loading each tile synchronously before its product with C in
// shared memory (GradQKKernel: 169 KB, one block per SM); the head gate's kernels
// (chunk_gated_head_*.cuh) show the faster layout, asynchronous copies and C in registers.
#pragma once

#include <cuda_bf16.h>
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

// A[i][j] (j <= i) += sum over this K slice of q_ik k_jk 2^(G_ik - G_jk). scratch: 160 rows.
// Starts and ends with the caller's barrier; the elementwise part and the products touch
// disjoint blocks of A.
__device__ inline void AccumulateScores(float* A, const bf16* q, const bf16* k, const float* G,
                                        bf16* scratch) {
  {
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
      const int s = r < 16 ? 1 : (r < 48 ? 2 : 3);
      const int j = r - SubBlockOffset(s), n = 16 * s;
      ksub[r * kLdBf16 + c] = __float2bfloat16(
          ToFloat(k[j * kLdBf16 + c]) * exp2f(G[n * kLdF32 + c] - G[j * kLdF32 + c]));
    }
    // Diagonal 16 x 16 blocks, elementwise in fp32.
    for (int idx = threadIdx.x; idx < kBT * 16; idx += kThreads) {
      const int i = idx / 16, j = (i & ~15) + idx % 16;
      if (j > i) continue;
      float acc = 0.0f;
      for (int c = 0; c < kBK; ++c) {
        acc += ToFloat(q[i * kLdBf16 + c]) * ToFloat(k[j * kLdBf16 + c]) *
               exp2f(G[i * kLdF32 + c] - G[j * kLdF32 + c]);
      }
      A[i * kLdF32 + j] += acc;
    }
    __syncthreads();
    for (int s = 1; s < 4; ++s) {
      Mma<true, false, kWarps>(16, 16 * s, kBK, qsub + 16 * s * kLdBf16, kLdBf16,
                               ksub + SubBlockOffset(s) * kLdBf16, kLdBf16, A + 16 * s * kLdF32,
                               kLdF32, true);
    }
  }
}

// Ab[i][j] = scale * A[i][j] for j <= i, else 0.
__device__ inline void MaskScores(bf16* Ab, const float* A, float scale) {
  for (int idx = threadIdx.x; idx < kBT * kBT; idx += kThreads) {
    const int i = idx / kBT, j = idx % kBT;
    Ab[i * kLdBf16 + j] = __float2bfloat16(j <= i ? A[i * kLdF32 + j] * scale : 0.0f);
  }
}

struct ChunkSmem {
  alignas(128) float A[kBT * kLdF32];     // 17408 B: scores
  alignas(128) float acc[kBT * kLdF32];   // 17408 B: o or dv tile
  alignas(128) float G[kBT * kLdF32];     // 17408 B: gate cumsum
  alignas(128) bf16 q[kBT * kLdBf16];     // 9216 B: q slice, then a state tile
  alignas(128) bf16 k[kBT * kLdBf16];     // 9216 B: k slice, then the masked bf16 scores
  // Sub-chunk operands (160 rows), then the v or d_o tile (64 rows).
  alignas(128) bf16 scratch[160 * kLdBf16];  // 23040 B
  // Followed in dynamic shared memory by K/64 decayed q (or k) slices, 9216 B each.
};  // + K/64 slices: K = 128 -> 111 KB (2 blocks per SM)

inline size_t ChunkSmemBytes(int k_dim) {
  return sizeof(ChunkSmem) + static_cast<size_t>(k_dim / kBK) * kBT * kLdBf16 * sizeof(bf16);
}

// dst[r][c] = state tile rows [k0, k0 + 64) x columns [v0, v0 + 64) of block `block`.
__device__ inline void LoadStateTile(bf16* dst, const bf16* states, const ChunkGatedParams& p,
                                     int block, int h, int k0, int v0) {
  for (int idx = threadIdx.x; idx < kBK * 8; idx += kThreads) {
    const int r = idx / 8, c8 = idx % 8;
    *reinterpret_cast<uint4*>(dst + r * kLdBf16 + c8 * 8) =
        *reinterpret_cast<const uint4*>(states + StateOffset(p, block, h, k0 + r, v0 + c8 * 8));
  }
}

__device__ inline void ZeroTile(float* t) {
  for (int idx = threadIdx.x; idx < kBT * kLdF32; idx += kThreads) t[idx] = 0.0f;
}

__device__ inline void StoreRows(bf16* base, const TensorStrides& s, const Chunk& c, int h,
                                 int col0, const float* tile) {
  for (int idx = threadIdx.x; idx < kBT * 8; idx += kThreads) {
    const int r = idx / 8, c8 = idx % 8;
    if (r < c.rows) {
      const float* src = tile + r * kLdF32 + c8 * 8;
      alignas(16) __nv_bfloat162 packed[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) packed[e] = __floats2bfloat162_rn(src[2 * e], src[2 * e + 1]);
      *reinterpret_cast<uint4*>(RowPtr(base, s, c.batch, c.t0 + r, h) + col0 + c8 * 8) =
          *reinterpret_cast<const uint4*>(packed);
    }
  }
}
// One (chunk, head) per block, in two phases. Phase 1 accumulates the scores A over the K slices
// and keeps each slice's decayed operand; phase 2 walks the V slices, so A is built once:
//   forward (kGradV = false):  o[:, v]  = (Q scale 2^G) h_c[:, v] + scale tril(A) V[:, v]
//   backward (kGradV = true):  dv[:, v] = (K 2^(G_last - G)) dh_c[:, v] + scale tril(A)^T dO[:, v]
template <bool kGradV>
__global__ void __launch_bounds__(kThreads) ChunkOutputKernel(ChunkGatedParams p,
                                                              const bf16* states) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  ChunkSmem& s = *reinterpret_cast<ChunkSmem*>(smem_raw);
  bf16* decayed = reinterpret_cast<bf16*>(smem_raw + sizeof(ChunkSmem));
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y;
  ZeroTile(s.A);
  for (int k0 = 0; k0 < p.k_dim; k0 += kBK) {
    __syncthreads();
    LoadRows(s.q, p.q, p.qk_strides, c, h, k0);
    LoadRows(s.k, p.k, p.qk_strides, c, h, k0);
    LoadChannelGate(s.G, p, c, h, k0);
    AccumulateScores(s.A, s.q, s.k, s.G, s.scratch);
    bf16* slice = decayed + (k0 / kBK) * kBT * kLdBf16;
    for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
      const int i = idx / kBK, col = idx % kBK;
      const float gi = s.G[i * kLdF32 + col];
      const float x = kGradV ? ToFloat(s.k[i * kLdBf16 + col]) *
                                   exp2f(s.G[(kBT - 1) * kLdF32 + col] - gi)
                             : ToFloat(s.q[i * kLdBf16 + col]) * p.scale * exp2f(gi);
      slice[i * kLdBf16 + col] = __float2bfloat16(x);
    }
  }
  __syncthreads();
  MaskScores(s.k, s.A, p.scale);
  const bf16* rhs = kGradV ? p.d_o : p.v;
  bf16* out = kGradV ? p.dv : p.o;
  for (int v0 = 0; v0 < p.v_dim; v0 += kBK) {
    for (int k0 = 0; k0 < p.k_dim; k0 += kBK) {
      __syncthreads();  // the previous product is done with s.q and s.acc
      LoadStateTile(s.q, states, p, c.global, h, k0, v0);
      __syncthreads();
      Mma<true, true, kWarps>(kBT, kBK, kBK, decayed + (k0 / kBK) * kBT * kLdBf16, kLdBf16, s.q,
                              kLdBf16, s.acc, kLdF32, k0 > 0);
    }
    LoadRows(s.scratch, rhs, p.v_strides, c, h, v0);
    __syncthreads();
    // forward: acc += Ab V; backward: acc += Ab^T dO (column-major view of Ab).
    Mma<!kGradV, true, kWarps>(kBT, kBK, kBT, s.k, kLdBf16, s.scratch, kLdBf16, s.acc, kLdF32, true);
    __syncthreads();
    StoreRows(out, p.v_strides, c, h, v0, s.acc);
  }
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

struct GradQKSmem {
  alignas(128) float dq[kBT * kLdF32];   // 17408 B: dq tile, then the dg terms
  alignas(128) float dk[kBT * kLdF32];   // 17408 B
  alignas(128) float G[kBT * kLdF32];    // 17408 B
  alignas(128) float dA[kBT * kLdF32];   // 17408 B: fp32 scale * tril(dO V^T)
  alignas(128) float tmp[kBT * kLdF32];  // 17408 B: off-diagonal sub-block products
  alignas(128) float kdk[kBT * kLdF32];  // 17408 B: k * dk_inter
  alignas(128) bf16 dAb[kBT * kLdBf16];  // 9216 B: bf16 dA
  alignas(128) bf16 q[kBT * kLdBf16];    // 9216 B
  alignas(128) bf16 k[kBT * kLdBf16];    // 9216 B
  // Four 64-row tiles (d_o, v, h_c, dh_c), then 192 rows of sub-chunk operands.
  alignas(128) bf16 work[4 * kBT * kLdBf16];  // 36864 B
  float R[kBT];            // rowsum(dh_c * h_c) for this K slice (bf16 states)
  float prefix_half[kBT];  // sum of k dk_inter over rows 0..31
  float suffix_half[kBT];  // sum of dg terms over rows 32..63
};  // ~169 KB (1 block per SM)

template <Gate kGate>
__global__ void __launch_bounds__(kThreads) GradQKKernel(ChunkGatedParams p, const bf16* states,
                                                         const bf16* d_states) {
  static_assert(kGate == Gate::kChannel, "the head gate's is HeadGradQKKernel");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  GradQKSmem& s = *reinterpret_cast<GradQKSmem*>(smem_raw);
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y;
  bf16* xo = s.work;                    // d_o slice
  bf16* xv = s.work + kBT * kLdBf16;     // v slice
  bf16* hs = s.work + 2 * kBT * kLdBf16;   // h_c tile
  bf16* dhs = s.work + 3 * kBT * kLdBf16;  // dh_c tile

  // dA = dO V^T over all V slices.
  for (int v0 = 0; v0 < p.v_dim; v0 += kBK) {
    __syncthreads();
    LoadRows(xo, p.d_o, p.v_strides, c, h, v0);
    LoadRows(xv, p.v, p.v_strides, c, h, v0);
    __syncthreads();
    Mma<true, false, kWarps>(kBT, kBT, kBK, xo, kLdBf16, xv, kLdBf16, s.dA, kLdF32, v0 > 0);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kBT * kBT; idx += kThreads) {
    const int i = idx / kBT, j = idx % kBT;
    const float d = j <= i ? s.dA[i * kLdF32 + j] * p.scale : 0.0f;
    s.dA[i * kLdF32 + j] = d;
    s.dAb[i * kLdBf16 + j] = __float2bfloat16(d);
  }

  for (int k0 = 0; k0 < p.k_dim; k0 += kBK) {
    __syncthreads();
    LoadRows(s.q, p.q, p.qk_strides, c, h, k0);
    LoadRows(s.k, p.k, p.qk_strides, c, h, k0);
    LoadChannelGate(s.G, p, c, h, k0);
    // Inter-chunk parts: dq = dO h_c^T and dk = V dh_c^T (decays applied below), and
    // R = rowsum(dh_c * h_c) from the same state tiles (4 threads per row, 16 columns each).
    // B(vv, kk) = hs[kk][vv]: the column-major view of a state tile.
    for (int v0 = 0; v0 < p.v_dim; v0 += kBK) {
      __syncthreads();
      LoadRows(xo, p.d_o, p.v_strides, c, h, v0);
      LoadRows(xv, p.v, p.v_strides, c, h, v0);
      LoadStateTile(hs, states, p, c.global, h, k0, v0);
      LoadStateTile(dhs, d_states, p, c.global, h, k0, v0);
      __syncthreads();
      Mma<true, false, kWarps>(kBT, kBK, kBK, xo, kLdBf16, hs, kLdBf16, s.dq, kLdF32, v0 > 0);
      Mma<true, false, kWarps>(kBT, kBK, kBK, xv, kLdBf16, dhs, kLdBf16, s.dk, kLdF32, v0 > 0);
      const int r = threadIdx.x / 4, part = threadIdx.x % 4;
      float acc = 0.0f;
#pragma unroll
      for (int col = part * 16; col < part * 16 + 16; ++col) {
        acc += ToFloat(dhs[r * kLdBf16 + col]) * ToFloat(hs[r * kLdBf16 + col]);
      }
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      acc += __shfl_xor_sync(0xffffffffu, acc, 2);
      if (part == 0) s.R[r] = (v0 == 0 ? 0.0f : s.R[r]) + acc;
    }
    __syncthreads();
    // One warp covers 32 columns of one row in these loops (kBK = 64, kThreads = 256).
    for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
      const int i = idx / kBK, col = idx % kBK;
      const float gi = s.G[i * kLdF32 + col];
      s.dq[i * kLdF32 + col] *= p.scale * exp2f(gi);
      const float dk_inter = s.dk[i * kLdF32 + col] * exp2f(s.G[(kBT - 1) * kLdF32 + col] - gi);
      s.dk[i * kLdF32 + col] = dk_inter;
      s.kdk[i * kLdF32 + col] = ToFloat(s.k[i * kLdBf16 + col]) * dk_inter;
    }
    __syncthreads();
    // Intra-chunk parts: dq += tril(dA) K, dk += tril(dA)^T Q, with the decays.
    {
      bf16* ksub = s.work;                 // 96 rows, as in AccumulateScores
      bf16* qsub = s.work + 96 * kLdBf16;  // 96 rows: q_i 2^(G_i - G_n'), n' = 16 s' + 15
      for (int idx = threadIdx.x; idx < 96 * kBK; idx += kThreads) {
        const int r = idx / kBK, col = idx % kBK;
        const int sk = r < 16 ? 1 : (r < 48 ? 2 : 3);
        const int j = r - SubBlockOffset(sk), n = 16 * sk;
        ksub[r * kLdBf16 + col] = __float2bfloat16(
            ToFloat(s.k[j * kLdBf16 + col]) * exp2f(s.G[n * kLdF32 + col] - s.G[j * kLdF32 + col]));
        // qsub blocks for s' = 0, 1, 2 hold rows i >= 16 s' + 16 (48, 32, 16 rows) at 0, 48, 80.
        const int sq = r < 48 ? 0 : (r < 80 ? 1 : 2);
        const int i = 16 * sq + 16 + r - (sq == 0 ? 0 : (sq == 1 ? 48 : 80));
        const int nq = 16 * sq + 15;
        qsub[r * kLdBf16 + col] = __float2bfloat16(
            ToFloat(s.q[i * kLdBf16 + col]) * exp2f(s.G[i * kLdF32 + col] - s.G[nq * kLdF32 + col]));
      }
      __syncthreads();
      for (int sb = 1; sb < 4; ++sb) {  // dq rows of sub-chunk sb from columns j < 16 sb
        Mma<true, true, kWarps>(16, kBK, 16 * sb, s.dAb + 16 * sb * kLdBf16, kLdBf16,
                                ksub + SubBlockOffset(sb) * kLdBf16, kLdBf16,
                                s.tmp + 16 * sb * kLdF32, kLdF32, false);
      }
      __syncthreads();
      for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
        const int i = idx / kBK, col = idx % kBK;
        const int n = i & ~15;
        const float gi = s.G[i * kLdF32 + col];
        float acc = i >= 16 ? exp2f(gi - s.G[n * kLdF32 + col]) * s.tmp[i * kLdF32 + col] : 0.0f;
        for (int j = n; j <= i; ++j) {
          acc += s.dA[i * kLdF32 + j] * ToFloat(s.k[j * kLdBf16 + col]) *
                 exp2f(gi - s.G[j * kLdF32 + col]);
        }
        s.dq[i * kLdF32 + col] += acc;
      }
      __syncthreads();
      for (int sb = 0; sb < 3; ++sb) {  // dk rows of sub-chunk sb from rows i >= 16 sb + 16
        const int first_i = 16 * sb + 16;
        Mma<false, true, kWarps>(16, kBK, kBT - first_i, s.dAb + first_i * kLdBf16 + 16 * sb,
                                 kLdBf16, qsub + (sb == 0 ? 0 : (sb == 1 ? 48 : 80)) * kLdBf16,
                                 kLdBf16, s.tmp + 16 * sb * kLdF32, kLdF32, false);
      }
      __syncthreads();
      for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
        const int j = idx / kBK, col = idx % kBK;
        const int n = (j & ~15) + 15;
        const float gj = s.G[j * kLdF32 + col];
        float acc = j < 48 ? exp2f(s.G[n * kLdF32 + col] - gj) * s.tmp[j * kLdF32 + col] : 0.0f;
        for (int i = j; i <= n; ++i) {
          acc += s.dA[i * kLdF32 + j] * ToFloat(s.q[i * kLdBf16 + col]) *
                 exp2f(s.G[i * kLdF32 + col] - gj);
        }
        s.dk[j * kLdF32 + col] += acc;
      }
    }
    __syncthreads();
    // Write dq, dk; keep the dg terms q dq - k dk (+ k dk_inter: the s >= t part).
    for (int idx = threadIdx.x; idx < kBT * kBK; idx += kThreads) {
      const int i = idx / kBK, col = idx % kBK;
      const float dq = s.dq[i * kLdF32 + col], dk = s.dk[i * kLdF32 + col];
      const float term =
          ToFloat(s.q[i * kLdBf16 + col]) * dq - ToFloat(s.k[i * kLdBf16 + col]) * dk;
      if (i < c.rows) {
        RowPtr(p.dq, p.qk_strides, c.batch, c.t0 + i, h)[k0 + col] = __float2bfloat16(dq);
        RowPtr(p.dk, p.qk_strides, c.batch, c.t0 + i, h)[k0 + col] = __float2bfloat16(dk);
      }
      s.dq[i * kLdF32 + col] = term + s.kdk[i * kLdF32 + col];
    }
    __syncthreads();
    {
      // Per column: exclusive prefix of k dk_inter, inclusive suffix of the terms; two threads per
      // column, 32 rows each, joined through prefix_half / suffix_half.
      const int col = threadIdx.x % 64, half = threadIdx.x / 64;
      if (half < 2) {
        float pre = 0.0f, suf = 0.0f;
        for (int i = half * 32; i < half * 32 + 32; ++i) {
          const float kd = s.kdk[i * kLdF32 + col];
          s.kdk[i * kLdF32 + col] = pre;
          pre += kd;
        }
        for (int i = half * 32 + 31; i >= half * 32; --i) {
          suf += s.dq[i * kLdF32 + col];
          s.dq[i * kLdF32 + col] = suf;
        }
        if (half == 0) s.prefix_half[col] = pre; else s.suffix_half[col] = suf;
      }
      __syncthreads();
      if (half < 2 && p.dg != nullptr) {
        const float base = s.R[col] * exp2f(s.G[(kBT - 1) * kLdF32 + col]) +
                           (half == 1 ? s.prefix_half[col] : s.suffix_half[col]);
        for (int i = half * 32; i < min(half * 32 + 32, c.rows); ++i) {
          RowPtr(p.dg, p.g_strides, c.batch, c.t0 + i, h)[k0 + col] =
              base + s.kdk[i * kLdF32 + col] + s.dq[i * kLdF32 + col];
        }
      }
    }
  }
}

}  // namespace flame::kernels::gated_chunk
