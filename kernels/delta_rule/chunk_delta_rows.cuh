// The row form of the delta rule's sequential state passes on warpgroup products (sm_90a), for
// batches too narrow for the column form (chunk_delta_columns.cuh needs a warpgroup per 64 value
// columns of every head, and at (2, 16384, 16, 128) that leaves half the multiprocessors idle).
// A block has 32 value columns; one warpgroup holds its K x 32 slice of the state (or its
// gradient) as K / 64 warpgroup accumulators of 64 x 32 (GroupAcc32: state rows 64 j + the
// accumulator's rows), and multiplies on m64n32 products (both passes give what the chain does not
// wait for to a second warpgroup: chunk_delta_row_forward.cuh, chunk_delta_row_backward.cuh):
//   the chunk's 64 x K operands (W, the queries, the keys) times the state: A = the operand's
//     swizzled tiles (K-major, read by the tensor cores), B = the state's bf16 copy, stored
//     transposed (32 rows of K, ColumnsTile);
//   the keys' transpose times the chunk's 64 x 32 values: A = the key tile by transposed ldmatrix
//     (each warp its own 16 rows: no fragment is loaded twice), B = the values' bf16 copy, again
//     stored transposed.
// The mma.sync passes (chunk_delta_state_pass.cuh) tile the same products over eight warps in
// 16 x 16 pieces, each warp loading its A and B fragments by ldmatrix: per chunk the same key and
// state fragments by two and four warps, which keeps their LSU ~80% busy (ncu). Here the tensor
// cores read each B once per product and the A tiles once.
//
// Measured on the H200 at (2, 16384, 16, 128) (128 blocks, one per multiprocessor; per call): the
// forward pass with o 484 -> 436 us against StateForwardKernel<2, 32, out>, the backward with M^T
// dO 491 -> 409 against StateBackwardKernel<2, unsplit, 32, MtdO>; forward + backward 2.29 -> 2.16
// ms (gated 2.36 -> 2.24). The passes are latency-bound (one warpgroup a multiprocessor, 0.18
// instructions issued per cycle): two things that did not help, each beside its parent in one run
// -- three tile sets, the copies two chunks ahead (forward 437 -> 455 us, backward 409 -> 412), and
// the next chunk's copies issued after the chunk's first products instead of before them (forward
// 436 -> 512, backward 408 -> 490). Nor did two more, measured the same way: two warpgroups a
// block, each 16 of its 32 value columns (m64n16 products; two chains a multiprocessor on the
// block's shared tile sets): forward 439 -> 534, backward 410 -> 488; and the scratch's addresses
// as per-lane pointers moved by a fixed step per chunk (the forward loop's SASS 1044 -> 893
// instructions): forward 439 -> 433, backward 410 -> 413. Nor, in the forward pass: U by the copy
// engine (a tile a chunk, read into the accumulators after the barrier) 439 -> 543, and with the
// copies out after the second proxy fence 435 -> 555 (the backward's d_o the same way: 410 -> 497);
// M Ut left running into the next chunk 439 -> 447; no G copies for the ungated rule 439 -> 444
// (backward 410 -> 407). What did help the forward pass: a second warpgroup for o and the copies
// out, with U by the copy engine, 437 -> 384 (chunk_delta_row_forward.cuh has the steps); and
// the backward pass, a second warpgroup for the loads of dO and G and the copies out, 412 -> 367.
// ncu of the one-warpgroup forward pass: ~560 instructions a warp and chunk, 0.19 issued a
// cycle, the stalls spread over fixed-latency waits (1.2 cycles an instruction), the long and the
// short scoreboard (1.0, 0.8) and the products (0.4); the most-stalled instructions W S's first
// product, the state copy's first store and the chunk's barrier.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_columns.cuh"  // PackBf16
#include "kernels/delta_rule/chunk_delta_swizzled.cuh"

namespace flame::kernels::delta_chunk::tiles {

constexpr int kRowFormCols = 32;  // value columns per block

// A warpgroup's 64 x 32 fp32 accumulator (wgmma m64n32; the lane layout of GroupAcc), with the
// row-form passes' conversions.
struct GroupAcc32 : GroupAcc<32> {
  __device__ __forceinline__ void Scale(float f) {
#pragma unroll
    for (int e = 0; e < 16; ++e) d[e] *= f;
  }
  // The lane's rows Row(0) times top, Row(1) times bottom.
  __device__ __forceinline__ void ScaleRowPair(float top, float bottom) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      d[4 * j] *= top, d[4 * j + 1] *= top, d[4 * j + 2] *= bottom, d[4 * j + 3] *= bottom;
    }
  }
  // The bf16 A fragment (mma.m16n8k16's a0..a3) of the warp's 16 x 16 block of columns 16 c ..
  // 16 c + 15: the pairs of rows g and g + 8, columns 2 t and 8 + 2 t.
  __device__ __forceinline__ void Bf16A(int c, uint32_t (&a)[4]) const {
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = PackBf16(d[8 * c + 2 * r], d[8 * c + 2 * r + 1]);
  }
  // The lane's bf16 pairs of a row-major matrix in global memory (src: row 0, column 0), pair
  // 4 h + j at row Row(h), column Col(j); rows from `rows` on load as zero. They stay packed until
  // SetPairs: unpacked at the load, the loading chunk waited for them (ncu: the forward pass's most
  // stalled instructions; 712 us instead of 526 at (2, 16384, 16, 128)).
  __device__ __forceinline__ static void LoadPairs(uint32_t (&x)[8], const bf16* src, int64_t ld,
                                                   int rows) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = Row(h);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x[4 * h + j] =
            row < rows ? *reinterpret_cast<const uint32_t*>(src + row * ld + Col(j)) : 0u;
      }
    }
  }
  // The lane's elements of columns col0 + Col(j) of a swizzled 64 x 64 bf16 tile (SwizzledAt) at
  // shared address tile; rows from `rows` on as zero.
  __device__ __forceinline__ void LoadSwizzled(uint32_t tile, int col0, int rows) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = Row(h);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = row < rows ? SwizzledPairAt(tile, row, col0 + Col(j)) : float2{0, 0};
        d[4 * j + 2 * h] = v.x, d[4 * j + 2 * h + 1] = v.y;
      }
    }
  }
  // From / to the block's 32 columns of a 64-row slice of a K x V fp32 state in global memory
  // (at: the slice's row 0, the block's column 0; null loads zeros), a pair of columns per access.
  __device__ __forceinline__ void LoadState(const float* at, int v_dim) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v =
            at ? *reinterpret_cast<const float2*>(at + Row(h) * v_dim + Col(j)) : float2{0, 0};
        d[4 * j + 2 * h] = v.x, d[4 * j + 2 * h + 1] = v.y;
      }
    }
  }
  __device__ __forceinline__ void StoreState(float* at, int v_dim) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        *reinterpret_cast<float2*>(at + Row(h) * v_dim + Col(j)) =
            make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
    }
  }
  __device__ __forceinline__ void SetPairs(const uint32_t (&x)[8]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = UnpackBf16(x[4 * h + j]);
        d[4 * j + 2 * h] = v.x, d[4 * j + 2 * h + 1] = v.y;
      }
    }
  }
};

// A warp's staging block for row-major stores of its 16 x 32 part of a GroupAcc32: stmatrix puts
// the bf16 fragments, then each lane stores 16-byte pieces, a warp instruction 8 whole 64-byte
// rows. (Stored from the registers a pair per lane, a warp instruction wrote 16 bytes of each of 8
// rows, and the stores' register reads queued behind them: the forward pass's most-stalled
// instruction was the first to overwrite one. With this stage the forward pass took 436 us
// instead of 526 at (2, 16384, 16, 128).)
// Rows 80 bytes apart: stmatrix's eight rows of a matrix hit different banks.
constexpr int kWarpStageLd = 80;  // bytes
constexpr int kWarpStageBytes = 16 * kWarpStageLd;
struct WarpStage {
  uint32_t put_at;  // the lane's stmatrix row address: row lane % 8 + 8 (lane / 8 % 2), column
                    // 8 (lane / 16)
  const char* get;  // the lane's first piece: row lane / 4, piece lane % 4

  // stage: the warp's block (shared address and generic pointer).
  __device__ WarpStage(uint32_t stage, const char* stage_ptr) {
    const int lane = threadIdx.x % 32;
    put_at = stage + (lane % 8 + 8 * (lane / 8 % 2)) * kWarpStageLd + lane / 16 * 16;
    get = stage_ptr + lane / 4 * kWarpStageLd + lane % 4 * 16;
  }
  // The A fragment of the warp's 16 x 16 block of columns 16 c .. (GroupAcc32::Bf16A), into the
  // block `offset` bytes after the warp's first.
  __device__ __forceinline__ void Put(uint32_t offset, int c, const uint32_t (&a)[4]) const {
    ptx::StoreMatrix4(put_at + offset + c * 32, a);
  }
  // The block's rows [0, rows) (after a __syncwarp that follows the puts) to a row-major bf16
  // matrix in global memory (dst: the block's row 0, column 0; rows ld apart).
  __device__ __forceinline__ void CopyOut(uint32_t offset, bf16* dst, int64_t ld, int rows) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = lane / 4 + 8 * i;
      if (r < rows) {
        *reinterpret_cast<uint4*>(dst + r * ld + lane % 4 * 8) =
            *reinterpret_cast<const uint4*>(get + offset + 8 * i * kWarpStageLd);
      }
    }
  }
};

// A K-major 32-column B operand in the 128-byte swizzle layout: 32 rows (the columns n) of 64 k
// (128 bytes), 4 KB; wgmma::DescriptorSwizzle128 reads it with its 1024 bytes between groups of 8
// rows, a k step of 16 adding 32 bytes. A warp puts the transpose of an A-layout fragment of a
// 16 x 16 block into it (stmatrix): the block's rows are 16 of the 64 k, its columns 16 of the
// 32 rows.
constexpr int kColumnsTileBytes = kRowFormCols * 128;
struct ColumnsTile {
  uint32_t put_at;  // the lane's row and piece for block rows 16 w (its warp's), columns 0

  // Each lane gives the address of row n = 8 (m / 2) + lane % 8 (+ 16 c) for matrix m = lane / 8,
  // whose 8 elements are k = 16 w + 8 (m % 2) ..: piece 2 w + m % 2 of that row, swizzled.
  __device__ explicit ColumnsTile(uint32_t tile) {
    const int lane = threadIdx.x % 32, m = lane / 8, w = threadIdx.x / 32 % 4;
    const int n = 8 * (m / 2) + lane % 8;
    put_at = tile + n * 128 + (((2 * w + m % 2) ^ n % 8) << 4);
  }
  // The warp's block of columns 16 c .. 16 c + 15 (rows 16 c .. of the tile; (n + 16) % 8 = n % 8
  // keeps the swizzle), `offset` bytes after the tile given.
  __device__ __forceinline__ void Put(uint32_t offset, int c, const uint32_t (&a)[4]) const {
    ptx::StoreMatrix4Trans(put_at + offset + c * 16 * 128, a);
  }
};

// ----------------------------------------------------------------------------------------------
// The products and copies both row-form passes make of the state (forward) or its gradient
// (backward), kNk 64-row slices of GroupAcc32.

// The state's bf16 copy, slice j into columns tile j of `tiles` (from `offset` bytes on: the
// products' B, 4 KB apart) and into the warp's staging block j (for the scratch's per-chunk copy,
// CopyOutState); the products before that read the copy must be done, and the stage's reads.
template <int kNk>
__device__ __forceinline__ void PutStateCopy(const GroupAcc32 (&S)[kNk], const ColumnsTile& tiles,
                                             const WarpStage& stage, uint32_t offset = 0) {
#pragma unroll
  for (int j = 0; j < kNk; ++j) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint32_t a[4];
      S[j].Bf16A(c, a);
      tiles.Put(offset + j * kColumnsTileBytes, c, a);
      stage.Put(j * kWarpStageBytes, c, a);
    }
  }
}
// The warp's staged rows of the copy (after a __syncwarp) to a bf16 K x V state in the scratch
// (dst: the warp's first row, the block's column 0).
template <int kNk>
__device__ __forceinline__ void CopyOutState(const WarpStage& stage, bf16* dst, int v_dim) {
#pragma unroll
  for (int j = 0; j < kNk; ++j)
    stage.CopyOut(j * kWarpStageBytes, dst + j * kBT * v_dim, v_dim, 16);
}

// acc (+)= (kNegA ? -A : A) S over K = 64 kNk, A the chunk's 64 x K operand (its swizzled tiles'
// descriptor a, K-major) and S the copy in its columns tiles (descriptor s); without kAccumulate
// the first step sets acc.
template <int kNk, bool kNegA, bool kAccumulate>
__device__ __forceinline__ void MultiplyStateCopy(float (&acc)[16], uint64_t a, uint64_t s) {
#pragma unroll
  for (int k = 0; k < 4 * kNk; ++k) {
    const uint64_t a_k = a + KMajorStep(k),
                   s_k = s + (k / 4) * (kColumnsTileBytes / 16) + k % 4 * 2;
    if (!kAccumulate && k == 0) {
      wgmma::MmaSharedA32<kNegA, false>(acc, a_k, s_k);
    } else {
      wgmma::MmaSharedA32<kNegA>(acc, a_k, s_k);
    }
  }
}

// The warp's transposed A fragments of kNk swizzled tiles of a chunk operand (keys, queries, W;
// `tiles` their shared address, 8 KB apart): tile j's columns warp_row .. + 15 as rows, the
// chunk's tokens 16 s .. as the k steps.
template <int kNk>
__device__ __forceinline__ void LoadTransposedA(uint32_t (&f)[kNk][4][4], uint32_t tiles,
                                                int warp_row) {
#pragma unroll
  for (int j = 0; j < kNk; ++j) {
    const SwizzledAOperand<true> op(tiles + j * kSwizzledTileBytes, warp_row);
#pragma unroll
    for (int s = 0; s < 4; ++s) op.Load(f[j][s], 0, s);
  }
}
// S_j += (kNegA ? -1 : 1) (operand tile j)^T X for each slice j, X a chunk's 64 x 32 values in a
// columns tile (descriptor x), from LoadTransposedA's fragments.
template <int kNk, bool kNegA>
__device__ __forceinline__ void AddTransposedProducts(GroupAcc32 (&S)[kNk],
                                                      const uint32_t (&f)[kNk][4][4], uint64_t x) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
#pragma unroll
    for (int j = 0; j < kNk; ++j) wgmma::MmaRegA32<kNegA>(S[j].d, f[j][s], x + 2 * s);
  }
}

}  // namespace flame::kernels::delta_chunk::tiles
