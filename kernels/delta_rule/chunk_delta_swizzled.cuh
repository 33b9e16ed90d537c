// Tiles of the sm_90a delta-rule kernels that multiply on warpgroup products (wgmma): 64 x 64 bf16
// tiles in the 128-byte swizzle layout, which the tensor cores read as B in either orientation
// (wgmma::DescriptorSwizzle128) and warps read as A by ldmatrix, their cp.async copies, and the
// warpgroup's accumulator layout, for RowTermsWgmmaKernel (chunk_delta_row_terms_wgmma.cuh) and
// the next such kernel. A kernel places these tiles at 1024-byte aligned shared addresses (the
// swizzle's period, which the hardware takes from the address bits; AlignedSharedBase).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/mma_tile.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Byte offset of element (r, c) of a 64 x 64 bf16 tile in the 128-byte swizzle layout of the
// warpgroup products (wgmma::DescriptorSwizzle128): 128-byte rows, 16-byte piece c / 8 of row r at
// piece (c / 8) ^ (r % 8). A warp's copy of four whole rows writes 512 bytes without a bank
// conflict and reads 128-byte runs of global memory, and the ldmatrix reads of any 8 x 8 block
// (eight rows of one piece column) hit eight different pieces.
__host__ __device__ constexpr int SwizzledAt(int r, int c) {
  return r * 128 + ((c / 8 ^ r % 8) << 4) + c % 8 * 2;
}
constexpr int kSwizzledTileBytes = kBT * kBT * 2;

// One thread's share of copying 64 rows x 64 bf16 of a token tensor into a swizzled tile
// (cp.async): rows t / 8 and t / 8 + 32, piece t % 8. Rows past `rows` are zero-filled.
__device__ __forceinline__ void IssueSwizzledTile(uint32_t tile, const bf16* chunk,
                                                  int64_t row_stride, int rows) {
  const int r = threadIdx.x / 8, c = threadIdx.x % 8;
  const uint32_t dst = tile + r * 128 + ((c ^ r % 8) << 4);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const bool valid = r + 32 * i < rows;
    ptx::CopyAsync16(dst + i * 32 * 128, valid ? chunk + (r + 32 * i) * row_stride + 8 * c : chunk,
                     valid ? 16 : 0);
  }
}

// A warpgroup's 64 x 64 fp32 accumulator (wgmma m64n64): warp w of the group holds rows
// 16 w .. 16 w + 15, lane (g, t) = (lane / 4, lane % 4) element d[4 j + 2 h + b] = C(16 w + g + 8
// h, 8 j + 2 t + b). Columns 16 m .. 16 m + 15 are a WarpAcc16 of the same lane layout. (A warp's
// part is WarpRows<64>'s layout, chunk_delta_columns.cuh, which holds a warp's transposed state
// columns; this one is a whole tile in row form, with its rows' places and stores.)
struct GroupAcc64 {
  float d[32];

  __device__ __forceinline__ static int Row(int h) {
    return 16 * (threadIdx.x / 32 % 4) + threadIdx.x % 32 / 4 + 8 * h;
  }
  __device__ __forceinline__ static int Col(int j) { return 8 * j + 2 * (threadIdx.x % 4); }
  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int e = 0; e < 32; ++e) d[e] = 0.0f;
  }
  // Each row's elements times f(row).
  template <typename F>
  __device__ __forceinline__ void ScaleRows(F f) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float s = f(Row(h));
#pragma unroll
      for (int j = 0; j < 8; ++j) d[4 * j + 2 * h] *= s, d[4 * j + 2 * h + 1] *= s;
    }
  }
  __device__ __forceinline__ tile::WarpAcc16 Piece(int m) const {
    tile::WarpAcc16 w;
#pragma unroll
    for (int e = 0; e < 8; ++e) w.x[e] = d[8 * m + e];
    return w;
  }
  // Rows [0, rows) to a row-major bf16 matrix in global memory (dst: row 0, column 0; rows ld
  // apart), rounded, in 16-byte pieces (WarpAcc16::StoreBf16Global16B).
  __device__ __forceinline__ void StoreRows(bf16* dst, int64_t ld, int rows) const {
    const int r0 = 16 * (threadIdx.x / 32 % 4);
#pragma unroll
    for (int m = 0; m < 4; ++m) Piece(m).StoreBf16Global16B(dst + r0 * ld + 16 * m, ld, rows - r0);
  }
  // The same in fp32, a pair of columns per store (a warp's store: 8 rows x 32 whole bytes).
  __device__ __forceinline__ void StoreRows(float* dst, int64_t ld, int rows) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = Row(h);
      if (r >= rows) continue;
      float* row = dst + r * ld + Col(0);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        *reinterpret_cast<float2*>(row + 8 * j) =
            make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
    }
  }
};

// A warp's bf16 A fragments (rows 16 w .. 16 w + 15 of its warpgroup's 64, one 16-deep k step at
// a time) of a swizzled tile, by ldmatrix; kTrans: A is the tile's transpose (A(i, l) =
// tile(l, i)). Matrix m of a fragment is rows + 8 (m % 2), k + 8 (m / 2); lane l gives the address
// of its row l % 8.
template <bool kTrans>
struct SwizzledAOperand {
  uint32_t row;    // the lane's row address (kTrans: at step 0)
  uint32_t piece;  // kTrans: its piece's offset; else the piece index before the step's XOR

  __device__ explicit SwizzledAOperand(uint32_t tile) {
    const int lane = threadIdx.x % 32, m = lane / 8, w = threadIdx.x / 32 % 4;
    if (kTrans) {  // tile rows l = 16 s + 8 (m / 2) + lane % 8, piece 2 w + m % 2
      row = tile + (8 * (m / 2) + lane % 8) * 128;
      piece = ((2 * w + m % 2) ^ lane % 8) << 4;
    } else {  // tile rows 16 w + 8 (m % 2) + lane % 8, piece 2 s + m / 2
      row = tile + (16 * w + 8 * (m % 2) + lane % 8) * 128;
      piece = m / 2 ^ lane % 8;
    }
  }
  // Step s's fragment, the tile `offset` bytes after the one given.
  __device__ __forceinline__ void Load(uint32_t (&a)[4], uint32_t offset, int s) const {
    if (kTrans) {
      ptx::LoadMatrix4Trans(a, row + offset + s * 2048 + piece);
    } else {
      ptx::LoadMatrix4(a, row + offset + ((piece ^ 2 * s) << 4));
    }
  }
};

// Elements (r, c) and (r, c + 1) of a swizzled bf16 tile (c even), in one 4-byte load.
__device__ __forceinline__ float2 SwizzledPairAt(uint32_t tile, int r, int c) {
  const uint32_t w = ptx::LoadShared(tile + SwizzledAt(r, c));
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// The first 1024-byte aligned address at or after a kernel's dynamic shared memory, whose
// allocation has 1024 bytes to spare for it: *at its generic pointer.
__device__ __forceinline__ uint32_t AlignedSharedBase(float4* smem, char** at) {
  const uint32_t unaligned = ptx::SharedAddr(smem);
  const uint32_t aligned = (unaligned + 1023) & ~1023u;
  *at = reinterpret_cast<char*>(smem) + (aligned - unaligned);
  return aligned;
}

}  // namespace flame::kernels::delta_chunk::tiles
