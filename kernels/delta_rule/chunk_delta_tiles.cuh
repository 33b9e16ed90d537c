// The tensor-core kernels of the chunked delta rule: every product of the chunk form (see
// chunk_delta_steps.h for the formulas) as 64 x 64 tiles in shared memory, with fp32
// accumulation. Operands are the scratch of chunk_delta_steps.h -- fp32, but for the bf16
// queries and keys (the inputs, or their l2norm rounded as the inputs were), W, U, the new values
// Ut, the gradients dUt, dY and dAb, and the per-chunk states -- and the bf16 inputs. Products of
// bf16 values run in bf16 (exact); an fp32 factor enters bf16 products as a hi + lo pair (16 bits
// of mantissa), but in the inverse (I + A)^-1, whose products split their factors into TF32 hi +
// lo, and T, which it rounds to TF32; the state passes multiply bf16 copies of the state they carry
// in fp32 (as fla's kernels do), and those copies are the per-chunk states the later kernels
// read. So the precision is that of the fp32 reference up to the rounding of T and the bf16
// rounding of the bf16 scratch (fla keeps the same tensors in bf16).
//
// Every kernel runs 256 threads (8 warps); the tile kernels work on 64 x 64 tiles (fp32: leading
// dimension 68 or 72, see kLd and kLdT; bf16: 72) and loop over K and V in 64-wide slices (K, V
// multiples of 64; K <= 256). Grids:
//   PrepareRowsKernel     (rows * H / 8)       q, k rows (l2norm), beta (sigmoid), g (in-kernel
//                                              gate); where q and k are read in place, the
//                                              scalar step RowScalars instead
//   ChunkPrepareKernel    (chunks, H)          M, W, U, and in the backward T = (I + A)^-1 and KD
//                                              (chunk_delta_prepare.cuh; on the H100/H200
//                                              ChunkPrepareWgmmaKernel, (chunks * H) heads
//                                              fastest, chunk_delta_prepare_wgmma.cuh)
//   StateForwardKernel    (V/32 or V/64, H, N) sequential over a sequence's chunks: S, Ut
//                                              (chunk_delta_state_pass.cuh; on the H100/H200
//                                              for wide batches at K <= 128 the column form,
//                                              StateForwardWgmmaKernel, chunk_delta_columns.cuh,
//                                              128 or 256 threads; at K = 256, (V/128, H, N),
//                                              StateForwardWgmmaSplitKernel,
//                                              chunk_delta_column_forward_split.cuh; for narrow
//                                              ones at K <= 128 the row form,
//                                              chunk_delta_rows.cuh)
//   OutputKernel          (chunks, H, V/64)    o (chunk_delta_output.cuh), where the forward
//                                              pass does not write it
//   LocalValueGradsKernel (chunks, H, V/64)    scale M^T dO, the chunk-local part of dUt
//                                              (chunk_delta_local_value_grads.cuh), where the
//                                              backward pass does not form it
//   StateBackwardKernel   (V/32 or V/64, H, N) reverse over the chunks: dS, dUt (ditto;
//                                              StateBackwardWgmmaKernel,
//                                              StateBackwardWgmmaSplitKernel, the row form)
//   WYBackwardKernel      (chunks * H)         through T: dv, dY, dAb + dAb^T, the parts of dbeta
//                                              and (gated) dG without k
//                                              (chunk_delta_wy_backward.cuh)
//   RowTermsKernel        (chunks * K/64, H)   dq, dk (of the normalised q and k with the
//                                              l2norm), parts of dbeta and (gated) dG
//                                              (chunk_delta_row_terms.cuh; on the H100/H200
//                                              RowTermsWgmmaKernel, (chunks * H * K/64) the
//                                              slices fastest, then the heads,
//                                              chunk_delta_row_terms_wgmma.cuh)
//   RowGradSumsKernel     (chunks, H/32)       dbeta and (gated) dG: the two kernels' parts
//                                              summed
//   FinishRowsKernel      (chunks, H)          with the l2norm: dq, dk through its backward
// The grids (chunks * H) and (chunks * H * K/64) are one-dimensional with the heads varying
// before the chunks (kernels/common/chunk_grid.cuh says why).
// Rows past a chunk's end (the tail of a sequence) load as zero and are never stored.
// Decay factors computed per element of a tile use the hardware exponential (__expf: a few ulp
// near 0, where the factors matter; the tests' tolerances are four orders above that).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/block_items.cuh"
#include "kernels/common/mma_tile.cuh"
#include "kernels/delta_rule/chunk_delta_steps.h"
#include "kernels/norm/row_ops.cuh"  // LoadBf16x8, StoreBf16x8

namespace flame::kernels::delta_chunk::tiles {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLd = tile::kLdF32;  // 68: rows padded by 16 bytes against bank conflicts
// kLdT sizes a region (64 x kLdT floats) that holds an fp32 tile and, after it, two bf16 tiles
// (2 x 64 x kLdBf16 x 2 bytes = 64 x kLdT x 4): ChunkPrepare's A, then T diag(f) as hi and lo
// tiles.
constexpr int kLdT = kBT + 8;
constexpr int kTile = kBT * kLd;  // floats in one 64 x 64 tile
static_assert(kBT == 64 && kThreads == 256, "tile loops assume 64 x 64 tiles and 256 threads");

// A 64 x 64 product accumulated in registers (the products themselves: tile::Mma*Acc64).
using Acc = tile::Acc64;

// ----------------------------------------------------------------------------------------------
// Tile moves between global memory and shared memory (float4 / 16-byte accesses; the launcher
// checks the alignment of the bf16 tensors, the scratch is 256-byte aligned).

template <typename T>
__device__ inline T* TokPtr(T* base, const ChunkDeltaParams& p, const Chunk& c, int r, int h,
                            int dim) {
  return base + ((c.row + r) * p.heads + h) * dim;
}

// Four adjacent bf16 values (8-byte aligned) <-> a float4.
__device__ inline float4 LoadBf16x4(const __nv_bfloat16* src) {
  const uint2 raw = *reinterpret_cast<const uint2*>(src);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ inline void StoreBf16x4(__nv_bfloat16* dst, float4 v) {
  uint2 raw;
  *reinterpret_cast<__nv_bfloat162*>(&raw.x) = __floats2bfloat162_rn(v.x, v.y);
  *reinterpret_cast<__nv_bfloat162*>(&raw.y) = __floats2bfloat162_rn(v.z, v.w);
  *reinterpret_cast<uint2*>(dst) = raw;
}
__device__ inline float Dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// Rows [0, rows) of a 64 x 64 accumulator to fp32 global memory (dst at its row 0, column 0;
// rows ld apart), straight from the registers, two adjacent columns per store. The lane's four
// rows are 8, 32 and 40 rows after its first, so their addresses are the first row's plus
// multiples of 8 ld, and the second pair of a row is 8 columns on (an immediate offset): written
// with a product per store, the compiler formed each store's 64-bit address anew inside its row
// guard, ~14 instructions a store (~270 of RowTermsKernel's ~2160 in SASS).
__device__ inline void StoreAccRows(const Acc& acc, float* dst, int64_t ld, int rows) {
  const int r0 = Acc::ElementRow(0, 0);
  float* const first = dst + r0 * ld + Acc::ElementCol(0);
  const int64_t ld8 = 8 * ld;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (r0 + 32 * i + 8 * half >= rows) continue;
      float* const row = first + (4 * i + half) * ld8;
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8) {
        const int e = 4 * n8 + 2 * half;
        *reinterpret_cast<float2*>(row + 8 * n8) =
            make_float2(acc.part[i].x[e], acc.part[i].x[e + 1]);
      }
    }
  }
}
// The same to bf16 (rounded), in 16-byte row pieces (Acc64::StoreBf16Global16B): stored by pairs
// of columns, a warp's store instruction wrote half of each 32-byte sector it touched.
__device__ inline void StoreAccRows(const Acc& acc, __nv_bfloat16* dst, int64_t ld, int rows) {
  acc.StoreBf16Global16B(dst, ld, rows);
}

// The lower part of the packed chunk matrix TKD (Scratch::TKD; dst: 64 x 64, leading dimension
// 64) from T = (I + A)^-1 in shared memory (leading dimension kLd), its diagonal included. A
// thread keeps one column, so that a warp's stores are one row's 128 bytes, and the stores leave
// the upper part (KD^T, stored from the registers) alone.
__device__ inline void StoreLowerT(float* dst, const float* T) {
  const int j = threadIdx.x % kBT;
  for (int i = threadIdx.x / kBT; i < kBT; i += kThreads / kBT) {
    if (j <= i) dst[i * kBT + j] = T[i * kLd + j];
  }
}

// T as a split tile (bf16 hi + lo, tile::kLdSplit) from a copy of the packed matrix TKD (leading
// dimension kLd), whose lower part holds it: zeros above the diagonal, where TKD holds KD^T. By
// the block, four columns a thread and step: exact for T's TF32 values (their 11 significant bits
// fit in hi's 8 and lo's 8). Not synchronised.
__device__ inline void StoreSplitLowerT(__nv_bfloat16* dst, const float* tkd) {
  ForBlockItems<kThreads, kBT * 16>([&](int idx) {
    const int r = idx / 16, c4 = idx % 16 * 4;
    const float4 x = *reinterpret_cast<const float4*>(tkd + r * kLd + c4);
    const auto lower = [&](int c, float v) { return c <= r ? v : 0.0f; };
    uint2 hi, lo;
    __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(&hi);
    __nv_bfloat16* l = reinterpret_cast<__nv_bfloat16*>(&lo);
    tile::StoreSplitBf16Pair(h, l, lower(c4, x.x), lower(c4 + 1, x.y));
    tile::StoreSplitBf16Pair(h + 2, l + 2, lower(c4 + 2, x.z), lower(c4 + 3, x.w));
    __nv_bfloat16* at = dst + r * tile::kLdSplit + c4;
    *reinterpret_cast<uint2*>(at) = hi;
    *reinterpret_cast<uint2*>(at + tile::kSplitLoStep) = lo;
  });
}

// acc += A B for one warp's 16 x 16 tile over k < kd (a multiple of 8), A and B row-major fp32
// (a: the tile's row 0 at k = 0, 16-byte aligned rows; b: row k = 0 at the tile's column 0), as
// three TF32 products of the operands split into TF32 hi + lo parts (lo x lo left out): close to
// fp32 products, which InvertUnitLower needs (T feeds W, U and through them the states).
__device__ __forceinline__ void MmaSplitTf32Warp16(tile::WarpAcc16& acc, int kd, const float* a,
                                                   int lda, const float* b, int ldb) {
  const tile::Tf32AOperand<true> ao(a, lda);
  const tile::Tf32BOperand<true> bo(b, ldb);
  const auto split = [](uint32_t(&hi)[4], uint32_t(&lo)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float x = __uint_as_float(hi[i]), h = tile::RoundTf32(x);
      hi[i] = __float_as_uint(h);
      lo[i] = __float_as_uint(tile::RoundTf32(x - h));
    }
  };
  for (int l = 0; l < kd; l += 8) {
    uint32_t a_hi[4], a_lo[4], b_hi[4], b_lo[4];
    ao.Load(a_hi, l);
    bo.Load(b_hi, l);
    split(a_hi, a_lo);
    split(b_hi, b_lo);
    tile::MmaStep(acc, a_lo, b_hi);
    tile::MmaStep(acc, a_hi, b_lo);
    tile::MmaStep(acc, a_hi, b_hi);
  }
}

// T = (I + A)^-1 for strictly lower A (both tiles, leading dimension kLd), by doubling: the four
// 16 x 16 diagonal blocks by forward substitution side by side, then the 32 x 32 and the 64 x 64
// diagonal blocks from the halves' inverses,
//   inv([[I + A_11, 0], [A_21, I + A_22]]) = [[T_1, 0], [-T_2 (A_21 T_1), T_2]],
// the two products of each step on tensor cores (MmaSplitTf32Warp16, one warp per 16 x 16 tile,
// the second product by the warp or after a barrier). Everything else in fp32; rows with A = 0
// (past the chunk's end) stay unit rows. Writes T (rounded to TF32: an operand; FinishT); ends
// synchronised. With kFinish false it leaves FinishT to the caller, whose pass over T applies it
// per element: the blocks above the diagonal hold intermediates then.
// (The off-diagonal blocks by block rows on the CUDA cores, each thread four columns of one row,
// took 51 of ChunkPrepare's 236 us per call at (8, 2048, 16, 128), bound by their shared-memory
// loads; this way ChunkPrepare takes 214.) The intermediates A_21 T_1 wait in the upper
// triangle, which is zeroed at the end.
constexpr int kInvBlock = 16;
constexpr int kInvBlocks = kBT / kInvBlock;

// Element (row, col) of T as InvertUnitLower leaves it (x) to its final value: zero in the 16 x 16
// blocks above the diagonal (the intermediates' place), else rounded to TF32.
__device__ __forceinline__ float FinishT(int row, int col, float x) {
  return row / kInvBlock < col / kInvBlock ? 0.0f : tile::RoundTf32(x);
}

template <bool kFinish = true>
__device__ inline void InvertUnitLower(float* T, const float* A) {
  static_assert(kThreads == kInvBlocks * kInvBlock * 4, "four lanes per column of a block");
  {
    // Diagonal block d, column c: four lanes, lane `part` holding rows part, part + 4, ... of the
    // column (zero above the diagonal); each step reads one row of the block of A (a broadcast).
    const int d = threadIdx.x / (kInvBlock * 4), c = threadIdx.x / 4 % kInvBlock;
    const int part = threadIdx.x % 4, o = d * kInvBlock;
    float col[kInvBlock / 4];
#pragma unroll
    for (int t = 0; t < kInvBlock / 4; ++t) col[t] = part + 4 * t == c ? 1.0f : 0.0f;
#pragma unroll
    for (int i = 1; i < kInvBlock; ++i) {
      float acc = 0.0f;
#pragma unroll
      for (int t = 0; 4 * t < i; ++t) {
        if (part + 4 * t < i) acc += A[(o + i) * kLd + o + part + 4 * t] * col[t];
      }
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      acc += __shfl_xor_sync(0xffffffffu, acc, 2);
      if (c < i && part == i % 4) col[i / 4] = -acc;
    }
#pragma unroll
    for (int t = 0; t < kInvBlock / 4; ++t) T[(o + part + 4 * t) * kLd + o + c] = col[t];
  }
  __syncthreads();
  const int warp = threadIdx.x / 32;
  constexpr int kB = kInvBlock;
  if (warp < 2) {
    // The 32 x 32 block at o: X = A_21 T_1 waits in the top right 32 x 32 block (at row o / 2,
    // column 32 + o / 2), then -T_2 X goes below the diagonal.
    const int o = 2 * kB * warp;
    float* x_at = T + (kB * warp) * kLd + 2 * kB + kB * warp;
    tile::WarpAcc16 x, t;
    x.Zero(), t.Zero();
    MmaSplitTf32Warp16(x, kB, A + (o + kB) * kLd + o, kLd, T + o * kLd + o, kLd);
    x.Store(x_at, kLd);
    __syncwarp();
    MmaSplitTf32Warp16(t, kB, T + (o + kB) * kLd + o + kB, kLd, x_at, kLd);
    t.Scale(-1.0f);
    t.Store(T + (o + kB) * kLd + o, kLd);
  }
  __syncthreads();
  // The 64 x 64 block: X = A_21 T_1 (32 x 32, warp (r, c) its 16 x 16 tile r, c; T_1's tile
  // column c is zero above row 16 c) into the top right 32 x 32 block, then T's bottom left block
  // -T_2 X (T_2's tile row r is zero right of column 16 (r + 1)).
  const int r = warp / 2 % 2, c = warp % 2;
  if (warp < 4) {
    tile::WarpAcc16 x;
    x.Zero();
    MmaSplitTf32Warp16(x, 2 * kB - kB * c, A + (2 * kB + kB * r) * kLd + kB * c, kLd,
                       T + kB * c * kLd + kB * c, kLd);
    x.Store(T + kB * r * kLd + 2 * kB + kB * c, kLd);
  }
  __syncthreads();
  if (warp < 4) {
    tile::WarpAcc16 t;
    t.Zero();
    MmaSplitTf32Warp16(t, kB * (r + 1), T + (2 * kB + kB * r) * kLd + 2 * kB, kLd,
                       T + 2 * kB + kB * c, kLd);
    t.Scale(-1.0f);
    t.Store(T + (2 * kB + kB * r) * kLd + kB * c, kLd);
  }
  __syncthreads();
  if (!kFinish) return;
  const int col = threadIdx.x % kBT;  // a fixed column per thread: no index arithmetic per element
#pragma unroll
  for (int row = threadIdx.x / kBT; row < kBT; row += kThreads / kBT) {
    float& x = T[row * kLd + col];
    x = FinishT(row, col, x);
  }
  __syncthreads();
}

// ----------------------------------------------------------------------------------------------
// Forward

// One warp per (token row, head), where the kernels do not read q and k in place (QKInPlace):
// their copies q_rows, k_rows (l2-normalised with qk_l2norm) and the row scalars
// (StoreRowScalars). Each lane holds two adjacent columns of every 64-wide slice.
__global__ void __launch_bounds__(kThreads) PrepareRowsKernel(StepBase b) {
  const ChunkDeltaParams& p = b.p;
  const int64_t unit = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  if (unit >= TokenRows(p) * p.heads) return;
  const int lane = threadIdx.x % 32, h = static_cast<int>(unit % p.heads);
  const int64_t r = unit / p.heads;
  const int bt = static_cast<int>(r / p.seq_len), t = static_cast<int>(r % p.seq_len);
  const int64_t in = In(p.qk_strides, bt, t, h), out = Tok(p, r, h, p.k_dim);
  // The scalars' loads first, so that they are in flight with the rows' (issued after the row
  // stores, they cannot move above them and cost a second wait on memory).
  float beta = 0.0f, g = 0.0f, a_log = 0.0f;  // g: a, or a + dt_bias before the in-kernel gate
  if (lane == 0) {
    const int64_t si = In(p.scalar_strides, bt, t, h);
    beta = p.beta[si];
    if (b.gated) g = p.gate_in_kernel ? p.a[si] + p.dt_bias[h] : p.a[si];
    if (b.gated && p.gate_in_kernel) a_log = p.A_log[h];
  }
  constexpr int kSlices = kMaxK / 64;
  float2 q[kSlices], k[kSlices];
  float ss_q = 0.0f, ss_k = 0.0f;
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
    const int e = s * 64 + lane * 2;
    q[s] = k[s] = make_float2(0.0f, 0.0f);
    if (e < p.k_dim) {
      q[s] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.q + in + e));
      k[s] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.k + in + e));
    }
    ss_q += q[s].x * q[s].x + q[s].y * q[s].y;
    ss_k += k[s].x * k[s].x + k[s].y * k[s].y;
  }
  float rq = 1.0f, rk = 1.0f;
  if (p.qk_l2norm) {
    for (int off = 16; off > 0; off /= 2) {
      ss_q += __shfl_xor_sync(0xffffffffu, ss_q, off);
      ss_k += __shfl_xor_sync(0xffffffffu, ss_k, off);
    }
    rq = 1.0f / sqrtf(ss_q + kL2NormEps);
    rk = 1.0f / sqrtf(ss_k + kL2NormEps);
  }
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
    const int e = s * 64 + lane * 2;
    if (e < p.k_dim) {
      // bf16: without the l2norm these are the inputs, exact; with it, rounded as the inputs were.
      *reinterpret_cast<__nv_bfloat162*>(b.s.q_rows + out + e) =
          __floats2bfloat162_rn(q[s].x * rq, q[s].y * rq);
      *reinterpret_cast<__nv_bfloat162*>(b.s.k_rows + out + e) =
          __floats2bfloat162_rn(k[s].x * rk, k[s].y * rk);
    }
  }
  if (lane == 0) StoreRowScalars(b, unit, beta, g, a_log);
}

// ----------------------------------------------------------------------------------------------
// Backward

// Per chunk and 32 heads: dG_i = WYBackward's part (in dG) + the sum over the K slices of
// RowTerms' parts + beta_i kx_i, and dbeta_i = WYBackward's part (in p.dbeta) + kx_i, through the
// sigmoid where beta comes as logits, with kx_i = gamma_i k_i . dX_i summed over the slices (the
// slices in order: deterministic, no atomics). The parts are contiguous by row and the row
// scalars by head: the sums go through shared memory, so that both are read a warp's 32
// neighbours at a time (one thread per (chunk, head, row) read or wrote one or the other 384
// bytes apart at H = 96: 51.7 us per call at (1, 8192, 96, 128) on the H200; this way 18.9).
constexpr int kSumHeads = 32;
__global__ void __launch_bounds__(kThreads) RowGradSumsKernel(StepBase b) {
  __shared__ float dG_sum[kBT][kSumHeads + 1], kx_sum[kBT][kSumHeads + 1];
  const ChunkDeltaParams& p = b.p;
  const int chunk = blockIdx.x, h0 = blockIdx.y * kSumHeads;
  const Chunk c = LocateChunk(p, chunk);
  const int nk = p.k_dim / kBT;
  ForBlockItems<kThreads, kBT * kSumHeads>([&](int idx) {
    const int r = idx % kBT, j = idx / kBT, h = h0 + j;
    if (h >= p.heads) return;
    float dG = 0.0f, kx = 0.0f;
    for (int slice = 0; slice < nk; ++slice) {
      const int64_t at = DGPart(p, chunk, h, slice) + r;
      if (b.gated) dG += b.s.dG_parts[at];  // (RowTerms forms no dG parts ungated)
      kx += b.s.kx_parts[at];
    }
    dG_sum[r][j] = dG;
    kx_sum[r][j] = kx;
  });
  __syncthreads();
  ForBlockItems<kThreads, kBT * kSumHeads>([&](int idx) {
    const int j = idx % kSumHeads, r = idx / kSumHeads, h = h0 + j;
    if (h >= p.heads || r >= c.rows) return;
    const int64_t row = Tok(p, c.row + r, h, 1);
    const float beta = b.s.bt[row], kx = kx_sum[r][j];
    if (b.gated) b.s.dG[row] += dG_sum[r][j] + beta * kx;
    float& dbeta = p.dbeta[In(p.scalar_strides, c.batch, c.t0 + r, h)];
    const float d = dbeta + kx;
    dbeta = p.beta_sigmoid ? d * beta * (1.0f - beta) : d;
  });
}

// Per (chunk, head), one warp per row, with the l2norm only: dq and dk from the gradients of the
// normalised rows, dx = (dy - y <y, dy>) / sqrt(sum x^2 + eps). A lane moves four adjacent
// columns at a time (one 16-byte fp32 and one 8-byte bf16 access), so a warp covers 128 columns
// of a row per access; a row stays in registers between its two reductions and its write.
__global__ void __launch_bounds__(kThreads) FinishRowsKernel(StepBase b) {
  constexpr int kPieces = kMaxK / 128;  // float4 pieces per lane of a q or k row
  const ChunkDeltaParams& p = b.p;
  const int chunk = blockIdx.x, h = blockIdx.y;
  const Chunk c = LocateChunk(p, chunk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = p.k_dim;
  for (int i = warp; i < c.rows; i += kWarps) {
    const int64_t ri = (c.row + i) * p.heads + h;
    const int64_t xi = In(p.qk_strides, c.batch, c.t0 + i, h);
    for (int which = 0; which < 2; ++which) {
      const __nv_bfloat16* raw = (which == 0 ? p.q : p.k) + xi;
      const __nv_bfloat16* y = (which == 0 ? b.s.qn : b.s.kn) + ri * K;
      const float* dy = (which == 0 ? b.s.dq_normed : b.s.dk_normed) + ri * K;
      __nv_bfloat16* dx = (which == 0 ? p.dq : p.dk) + xi;
      float4 yv[kPieces], dyv[kPieces];
      float ss = 0.0f, ydy = 0.0f;
#pragma unroll
      for (int j = 0; j < kPieces; ++j) {
        const int e = j * 128 + lane * 4;
        if (e < K) {
          dyv[j] = *reinterpret_cast<const float4*>(dy + e);
          yv[j] = LoadBf16x4(y + e);
          const float4 x = LoadBf16x4(raw + e);
          ss += Dot4(x, x);
          ydy += Dot4(yv[j], dyv[j]);
        }
      }
      for (int off = 16; off > 0; off /= 2) {
        ss += __shfl_xor_sync(0xffffffffu, ss, off);
        ydy += __shfl_xor_sync(0xffffffffu, ydy, off);
      }
      const float rstd = rsqrtf(ss + kL2NormEps);
#pragma unroll
      for (int j = 0; j < kPieces; ++j) {
        const int e = j * 128 + lane * 4;
        if (e < K) {
          const float4 g = dyv[j];
          StoreBf16x4(dx + e,
                      make_float4(rstd * (g.x - yv[j].x * ydy), rstd * (g.y - yv[j].y * ydy),
                                  rstd * (g.z - yv[j].z * ydy), rstd * (g.w - yv[j].w * ydy)));
        }
      }
    }
  }
}

}  // namespace flame::kernels::delta_chunk::tiles
