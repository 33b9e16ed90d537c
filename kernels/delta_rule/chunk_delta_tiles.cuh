// The tensor-core kernels of the chunked delta rule: every product of the chunk form (see
// chunk_delta_steps.h for the formulas) as 64 x 64 tiles in shared memory, with fp32
// accumulation. Operands are the scratch of chunk_delta_steps.h -- fp32, but for the bf16
// queries and keys (the inputs, or their l2norm rounded as the inputs were), W, U, the new values
// Ut, the gradients dW and dUt, and the per-chunk states -- and the bf16 inputs. Products of bf16
// values run in bf16 (exact); those with fp32 scratch in TF32; the state passes multiply bf16
// copies of the state they carry in fp32 (as fla's kernels do), and those copies are the
// per-chunk states the later kernels read. So the precision is that of the fp32 reference up to
// TF32 rounding of the factors and the bf16 rounding of the bf16 scratch (fla keeps the same
// tensors in bf16).
//
// Every kernel runs 256 threads (8 warps); the tile kernels work on 64 x 64 tiles (fp32: leading
// dimension 68 or 72, see kLd and kLdT; bf16: 72) and loop over K and V in 64-wide slices (K, V
// multiples of 64; K <= 256). Grids:
//   PrepareRowsKernel     (rows * H / 8)       q, k rows (l2norm), beta (sigmoid), g (in-kernel
//                                              gate); where q and k are read in place, the
//                                              scalar step RowScalars instead
//   ChunkPrepareKernel    (chunks, H)          M, T = (I + A)^-1, W, U, KD in the backward
//                                              (chunk_delta_prepare.cuh)
//   StateForwardKernel    (V/32 or V/64, H, N) sequential over a sequence's chunks: S, Ut
//                                              (chunk_delta_state_pass.cuh; on the H100/H200
//                                              for wide batches at K <= 128 the column form,
//                                              StateForwardWgmmaKernel, chunk_delta_columns.cuh,
//                                              128 or 256 threads)
//   OutputKernel          (chunks, H, V/64)    o (chunk_delta_output.cuh), where the forward
//                                              pass does not write it
//   LocalValueGradsKernel (chunks, H, V/64)    scale M^T dO, the chunk-local part of dUt
//                                              (chunk_delta_local_value_grads.cuh), where the
//                                              backward pass does not form it
//   StateBackwardKernel   (V/32 or V/64, H, N) reverse over the chunks: dS, dUt (ditto;
//                                              StateBackwardWgmmaKernel)
//   RowTermsKernel        (chunks * K/64, H)   dW, dq (of the normalised q with the l2norm), dk's
//                                              row terms, parts of dG (chunk_delta_row_terms.cuh;
//                                              on the H100/H200 RowTermsWgmmaKernel,
//                                              chunk_delta_row_terms_wgmma.cuh)
//   WYBackwardKernel      (chunks, H)          through T: dv, dk (of the normalised k with the
//                                              l2norm), dG, dbeta (chunk_delta_wy_backward.cuh)
//   FinishRowsKernel      (chunks, H)          with the l2norm: dq, dk through its backward
// Rows past a chunk's end (the tail of a sequence) load as zero and are never stored.
// Decay factors computed per element of a tile use the hardware exponential (__expf: a few ulp
// near 0, where the factors matter; the tests' tolerances are four orders above that).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/block_items.cuh"
#include "kernels/common/mma_tile.cuh"
#include "kernels/delta_rule/chunk_delta_steps.h"
#include "kernels/norm/row_ops.cuh"  // LoadBf16x8, StoreBf16x8

namespace flame::kernels::delta_chunk::tiles {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLd = tile::kLdF32;  // 68: rows padded by 16 bytes against bank conflicts
// 64-wide fp32 tiles read as TF32 B operands or transposed A operands (four 32-bit loads per
// fragment), or by the paired 8-byte loads of the fp32 x bf16 and transposed-B products:
// conflict-free at a leading dimension of 8 mod 32. (kLd suits those read as stored: ldmatrix,
// and the row pairs of the row-major B of the bf16 x TF32 products.)
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

// Rows [0, c.rows) of a 64 x 64 fp32 tile (leading dimension kLd) into columns [col0, col0 + 64)
// of a [R,H,dim] scratch tensor, fp32 or (rounded) bf16.
template <typename Out>
__device__ inline void StoreTok(Out* dst, const float* src, const ChunkDeltaParams& p,
                                const Chunk& c, int h, int dim, int col0) {
  const int r0 = threadIdx.x / 16, c4 = threadIdx.x % 16;
  const int64_t row_stride = int64_t{p.heads} * dim;
  Out* to = TokPtr(dst, p, c, 0, h, dim) + col0 + c4 * 4;
#pragma unroll
  for (int r = r0; r < kBT; r += kThreads / 16) {
    if (r < c.rows) {
      const float4 v = *reinterpret_cast<const float4*>(src + r * kLd + c4 * 4);
      if constexpr (std::is_same_v<Out, float>) {
        *reinterpret_cast<float4*>(to + r * row_stride) = v;
      } else {
        StoreBf16x4(to + r * row_stride, v);
      }
    }
  }
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

// Rows [0, c.rows) of a 64 x 64 fp32 tile into columns [col0, col0 + 64) of a [B,T,H,D] bf16
// tensor (strides st).
__device__ inline void StoreInBf16(__nv_bfloat16* dst, const float* src, const TensorStrides& st,
                                   const Chunk& c, int h, int col0) {
  const int r0 = threadIdx.x / 16, c4 = threadIdx.x % 16 * 4;
#pragma unroll
  for (int r = r0; r < kBT; r += kThreads / 16) {
    if (r < c.rows) {
      StoreBf16x4(dst + In(st, c.batch, c.t0 + r, h) + col0 + c4,
                  *reinterpret_cast<const float4*>(src + r * kLd + c4));
    }
  }
}

__device__ inline void StoreMat(float* dst, const float* src) {
  ForBlockItems<kThreads, kBT * 16>([&](int idx) {
    const int r = idx / 16, c4 = idx % 16;
    *reinterpret_cast<float4*>(dst + r * kBT + c4 * 4) =
        *reinterpret_cast<const float4*>(src + r * kLd + c4 * 4);
  });
}

// T = (I + A)^-1 for strictly lower A (both tiles, leading dimension kLd), in 16 x 16 blocks:
// the four diagonal blocks by forward substitution side by side, then block row by block row
//   R_ij = sum_{j <= k < i} A_ik T_kj,  T_ij = -T_ii R_ij   (block indices, j < i),
// the blocks j of a block row side by side, each thread four adjacent columns of one row: a
// 16-byte load of T (or R) serves four FMAs and an A (or T_ii) value is loaded once for the
// four. (One element per thread, every FMA waited on a load: forward substitution down all 64
// rows, 63 dependent steps each reading a row of A per lane, before that: the kernel's
// shared-memory pipe was its limit.) Everything in fp32; rows with A = 0 (past the chunk's end)
// stay unit rows. Writes T (rounded to TF32: an operand); ends synchronised.
constexpr int kInvBlock = 16;
constexpr int kInvBlocks = kBT / kInvBlock;

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
  // Block rows 1..3: thread (jb, r, c4) of block column jb < i, row r, columns c4 .. c4 + 3. R_ij
  // waits in block (j, i) of T, above the diagonal, which is zero at the end; T_ij goes below
  // it, where no thread of the block row reads.
  const int jb = threadIdx.x / 64, r = threadIdx.x / 4 % kInvBlock, c4 = threadIdx.x % 4 * 4;
  const auto fma4 = [](float4& acc, float a, float4 b) {
    acc.x += a * b.x, acc.y += a * b.y, acc.z += a * b.z, acc.w += a * b.w;
  };
#pragma unroll
  for (int i = 1; i < kInvBlocks; ++i) {
    if (jb < i) {
      const float* a_row = A + (i * kInvBlock + r) * kLd;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int k = jb; k < i; ++k) {
#pragma unroll
        for (int m4 = 0; m4 < kInvBlock; m4 += 4) {
          const float4 a = *reinterpret_cast<const float4*>(a_row + k * kInvBlock + m4);
          const float* t = T + (k * kInvBlock + m4) * kLd + jb * kInvBlock + c4;
          fma4(acc, a.x, *reinterpret_cast<const float4*>(t));
          fma4(acc, a.y, *reinterpret_cast<const float4*>(t + kLd));
          fma4(acc, a.z, *reinterpret_cast<const float4*>(t + 2 * kLd));
          fma4(acc, a.w, *reinterpret_cast<const float4*>(t + 3 * kLd));
        }
      }
      *reinterpret_cast<float4*>(T + (jb * kInvBlock + r) * kLd + i * kInvBlock + c4) = acc;
    }
    __syncthreads();
    if (jb < i) {
      const float* t_row = T + (i * kInvBlock + r) * kLd + i * kInvBlock;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int m4 = 0; m4 < kInvBlock; m4 += 4) {
        const float4 t = *reinterpret_cast<const float4*>(t_row + m4);
        const float* r_col = T + (jb * kInvBlock + m4) * kLd + i * kInvBlock + c4;
        fma4(acc, t.x, *reinterpret_cast<const float4*>(r_col));
        fma4(acc, t.y, *reinterpret_cast<const float4*>(r_col + kLd));
        fma4(acc, t.z, *reinterpret_cast<const float4*>(r_col + 2 * kLd));
        fma4(acc, t.w, *reinterpret_cast<const float4*>(r_col + 3 * kLd));
      }
      *reinterpret_cast<float4*>(T + (i * kInvBlock + r) * kLd + jb * kInvBlock + c4) =
          make_float4(-acc.x, -acc.y, -acc.z, -acc.w);
    }
    __syncthreads();
  }
  const int col = threadIdx.x % kBT;  // a fixed column per thread: no index arithmetic per element
#pragma unroll
  for (int row = threadIdx.x / kBT; row < kBT; row += kThreads / kBT) {
    float& x = T[row * kLd + col];
    x = row / kInvBlock < col / kInvBlock ? 0.0f : tile::RoundTf32(x);
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
      const float* dy = (which == 0 ? b.s.dq_normed : b.s.dk_rows) + ri * K;
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
