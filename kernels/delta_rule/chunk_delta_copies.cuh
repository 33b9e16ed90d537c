// Asynchronous copies (cp.async) of a chunk's tiles into shared memory, for the delta-rule kernels
// that stage their operands without a pass through registers. Rows past the chunk's end are
// zero-filled (read from the chunk's first row, which exists). A thread's offsets within a chunk
// are fixed, so that a copy is a base pointer plus constants (the state passes move the base by
// a fixed stride per chunk).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/mma_tile.cuh"
#include "kernels/delta_rule/chunk_delta_tiles.cuh"

namespace flame::kernels::delta_chunk::tiles {

using tile::bf16;
using tile::kLdBf16;

constexpr int kBf16Tile = kBT * kLdBf16;  // elements of a 64 x 64 bf16 tile

// One thread's pieces of a chunk's 64 x (64 nk) bf16 operand (qn, kn, or rows of a bf16 input
// such as v or dO) as nk 64 x 64 tiles (leading dimension kLdBf16): rows r0 and r0 + 32, 16
// bytes at column c8 of every tile; row_stride: elements between the source's rows.
struct TokTilePieces {
  int row[2];
  int64_t src[2];  // from the chunk's row 0
  int dst;         // in a tile

  __device__ explicit TokTilePieces(int64_t row_stride) {
    const int r0 = threadIdx.x / 8, c8 = threadIdx.x % 8 * 8;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row[i] = r0 + 32 * i;
      src[i] = row[i] * row_stride + c8;
    }
    dst = r0 * kLdBf16 + c8;
  }
  // chunk: the chunk's row 0 (head h, column 0).
  __device__ void Issue(bf16* tiles, const bf16* chunk, int rows, int nk) const {
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j < nk) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const bool valid = row[i] < rows;
          __pipeline_memcpy_async(tiles + j * kBf16Tile + dst + i * 32 * kLdBf16,
                                  chunk + (valid ? src[i] : 0) + j * kBT, 16, valid ? 0 : 16);
        }
      }
    }
  }
};

// The reverse: rows [0, rows) of a 64 x 64 bf16 tile (leading dimension kLdBf16) to 64 columns
// of a bf16 tensor (dst: row 0, first column; rows row_stride apart), 16 bytes per piece.
__device__ inline void StoreTokTile(bf16* dst, int64_t row_stride, const bf16* tile, int rows) {
  for (int idx = threadIdx.x; idx < rows * 8; idx += kThreads) {
    const int r = idx / 8, c8 = idx % 8 * 8;
    *reinterpret_cast<uint4*>(dst + r * row_stride + c8) =
        *reinterpret_cast<const uint4*>(tile + r * kLdBf16 + c8);
  }
}

// A 64 x 64 fp32 matrix (rows src_ld apart: a chunk matrix, or a slice of a state) into a tile
// of leading dimension kLdTile.
template <int kLdTile>
__device__ inline void IssueMat(float* dst, const float* src, int64_t src_ld = kBT) {
  const int r = threadIdx.x / 16, c4 = threadIdx.x % 16 * 4;
#pragma unroll
  for (int i = 0; i < kBT * 16 / kThreads; ++i) {
    __pipeline_memcpy_async(dst + (r + 16 * i) * kLdTile + c4, src + (r + 16 * i) * src_ld + c4,
                            16);
  }
}

// G and beta of the chunk's rows (G, beta: the chunk's row 0 of the [R,H] scratch at head h);
// rows past the end repeat the last G and have beta 0. Null beta_dst: G only.
__device__ inline void IssueRowScalars(float* G_dst, float* beta_dst, const float* G,
                                       const float* beta, int heads, int rows) {
  const int r = threadIdx.x % kBT;
  if (threadIdx.x < kBT) {
    __pipeline_memcpy_async(G_dst + r, G + (r < rows ? r : rows - 1) * heads, 4);
  } else if (threadIdx.x < 2 * kBT && beta_dst != nullptr) {
    const bool valid = r < rows;
    __pipeline_memcpy_async(beta_dst + r, beta + (valid ? r * heads : 0), 4, valid ? 0 : 4);
  }
}

}  // namespace flame::kernels::delta_chunk::tiles
