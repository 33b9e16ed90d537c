// Chunk indexing, tile loads and the gate cumsum shared by the gated chunk kernels
// (chunk_gated_states.cuh, chunk_gated.cuh). Device code; included through chunk_gated.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/block_items.cuh"
#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_grid.cuh"
#include "kernels/common/chunk_seqs.h"
#include "kernels/common/mma_tile.cuh"
#include "kernels/norm/row_ops.cuh"  // LoadBf16x8

namespace flame::kernels::gated_chunk {

using tile::bf16;
using tile::kLdBf16;
using tile::kLdF32;
using tile::Mma;

constexpr int kBT = kGatedChunkSize;  // chunk length (rows)
constexpr int kBK = 64;               // K and V slice width
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
using ptx::kRcpLn2;
constexpr int kTileElems = kBT * kLdBf16;  // one 64-row bf16 tile
static_assert(kBT == 64 && kBK == 64 && kThreads == 256,
              "tile loops assume 64 x 64 tiles, 256 threads");

enum class Gate {
  kHead,     // g [B,T,H] or g_gamma [H]: one decay per head and token
  kChannel,  // g [B,T,H,K]: one decay per key channel
};

// ----------------------------------------------------------------------------------------------
// Indexing

using Seq = ChunkSeq;

struct Chunk {
  int seq, batch, t0, rows, index, count, global;
};

__device__ inline Chunk MakeChunk(int seq_index, const Seq& s, int index) {
  return {seq_index, s.batch,      s.bos + index * kBT,  min(kBT, s.len - index * kBT),
          index,     s.num_chunks, s.first_chunk + index};
}

__device__ inline Chunk LocateChunk(const ChunkGatedParams& p, int global) {
  const int n = SeqOfChunk<kBT>(p, global);
  const Seq s = LocateSeq<kBT>(p, n);
  return MakeChunk(n, s, global - s.first_chunk);
}

// Their (chunk, head[, slice]) blocks: kernels/common/chunk_grid.cuh.

// Elements from a [B,T,H,D] tensor's origin to row (batch, t) at head h.
__device__ inline int64_t RowOffset(const TensorStrides& s, int batch, int t, int h) {
  return batch * s.batch + int64_t{t} * s.token + int64_t{h} * s.head;
}

template <typename T>
__device__ inline T* RowPtr(T* base, const TensorStrides& s, int batch, int t, int h) {
  return base + RowOffset(s, batch, t, h);
}

// Offset of element (row, col) of head h's K x V state block `block` (a chunk or a sequence).
__device__ inline int64_t StateOffset(const ChunkGatedParams& p, int block, int h, int row,
                                      int col) {
  return ((int64_t{block} * p.heads + h) * p.k_dim + row) * p.v_dim + col;
}

__device__ inline float ToFloat(float x) { return x; }
__device__ inline float ToFloat(bf16 x) { return __bfloat162float(x); }

// f(m, r, col) over a kRows x 64 tile: warp w takes rows r = w + 8 m (m < kRows / 8), each lane
// the column pair col = 2 lane, col + 1, so that one warp reads and writes a row's 64 columns in
// 4-byte (bf16) or 8-byte (fp32) pieces. Unrolled, m is a constant: a row's place in a layout of
// 8-row-aligned blocks (which sub-chunk it belongs to) folds at compile time.
template <int kRows, typename F>
__device__ __forceinline__ void ForRowPairs(F f) {
  static_assert(kRows % kWarps == 0, "every warp takes the same rows");
  const int w = threadIdx.x / 32, col = 2 * (threadIdx.x % 32);
#pragma unroll
  for (int m = 0; m < kRows / kWarps; ++m) f(m, w + kWarps * m, col);
}

__device__ inline float2 LoadPair(const bf16* t, int r, int col) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(t + r * kLdBf16 + col));
}
__device__ inline float2 LoadPair(const float* t, int r, int col) {
  return *reinterpret_cast<const float2*>(t + r * kLdF32 + col);
}
__device__ inline void StorePair(bf16* t, int r, int col, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(t + r * kLdBf16 + col) = __floats2bfloat162_rn(x, y);
}

// Eight consecutive entries of row r from column c0 (16-byte aligned), as floats.
__device__ inline void LoadEight(const bf16* t, int r, int c0, float (&x)[8]) {
  LoadBf16x8(t + r * kLdBf16 + c0, x);
}
__device__ inline void LoadEight(const float* t, int r, int c0, float (&x)[8]) {
  const float4 lo = *reinterpret_cast<const float4*>(t + r * kLdF32 + c0);
  const float4 hi = *reinterpret_cast<const float4*>(t + r * kLdF32 + c0 + 4);
  x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w;
  x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
}

using ptx::Exp2;

// ----------------------------------------------------------------------------------------------
// Tile loads

// dst[r][c] = row t0 + r, columns [col0, col0 + 64) of a [B,T,H,D] bf16 tensor; rows past `rows`
// are zero. 16-byte loads: the launcher checks strides and pointers for 8-element alignment.
__device__ inline void LoadRows(bf16* dst, const bf16* base, const TensorStrides& s, const Chunk& c,
                                int h, int col0) {
  ForBlockItems<kThreads, kBT * 8>([&](int idx) {
    const int r = idx / 8, c8 = idx % 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < c.rows) {
      val = *reinterpret_cast<const uint4*>(RowPtr(base, s, c.batch, c.t0 + r, h) + col0 + c8 * 8);
    }
    *reinterpret_cast<uint4*>(dst + r * kLdBf16 + c8 * 8) = val;
  });
}

// A thread's share of the asynchronous copy of a 64 x 64 tile from a [B,T,H,D] tensor by a block
// of kCopyThreads threads: 64 x 8 16-byte pieces, a thread's at rows `row`, row + kCopyThreads /
// 8, ... (rows past the chunk zero-filled). The per-thread offsets are formed once, for kernels
// that copy a tile per chunk in a loop over the chunks.
template <int kCopyThreads>
struct TileCopyBy {
  static constexpr int kRowStep = kCopyThreads / 8;  // rows between a thread's pieces
  int row;                                           // this thread's first row
  int dst;                                           // its first piece in the tile
  int64_t src;       // and in the tensor, from the chunk's first row at the tile's first column
  int64_t src_step;  // kRowStep rows of the tensor

  __device__ explicit TileCopyBy(const TensorStrides& s)
      : row(static_cast<int>(threadIdx.x) / 8),
        dst(row * kLdBf16 + threadIdx.x % 8 * 8),
        src(row * s.token + threadIdx.x % 8 * 8),
        src_step(kRowStep * s.token) {}

  // chunk_rows: the tensor at the chunk's first row and the tile's first column.
  __device__ __forceinline__ void Issue(bf16* tile, const bf16* chunk_rows, int rows) const {
#pragma unroll
    for (int i = 0; i < kBT / kRowStep; ++i) {
      const bool valid = row + kRowStep * i < rows;
      const bf16* from = valid ? chunk_rows + src + i * src_step : chunk_rows;
      __pipeline_memcpy_async(tile + dst + kRowStep * i * kLdBf16, from, 16, valid ? 0 : 16);
    }
  }
};
using TileCopy = TileCopyBy<kThreads>;

// The tensor at chunk c's first row, column col0, of head h.
__device__ inline const bf16* ChunkRows(const bf16* base, const TensorStrides& s, const Chunk& c,
                                        int h, int col0) {
  return RowPtr(base, s, c.batch, c.t0, h) + col0;
}

// Asynchronous copies of one chunk's 64 x 64 tiles (rows past the chunk zero-filled) from
// [B,T,H,D] tensors that share strides (q and k; v and d_o), for kernels that copy several: the
// thread's offsets and the chunk's first row are formed once, and a copy adds the tensor's base
// and the tile's first column. (Formed per copy: 80 more instructions in HeadChunkOutputKernel.)
struct ChunkRowsCopy {
  TileCopy copy;
  int64_t origin;  // the chunk's first row at head h, column 0
  int rows;
  __device__ ChunkRowsCopy(const TensorStrides& s, const Chunk& c, int h)
      : copy(s), origin(RowOffset(s, c.batch, c.t0, h)), rows(c.rows) {}
  __device__ __forceinline__ void Issue(bf16* dst, const bf16* base, int col0) const {
    copy.Issue(dst, base + origin + col0, rows);
  }
};

// Asynchronous copy of one 64 x 64 tile of a [B,T,H,D] tensor (rows past the chunk zero-filled).
__device__ inline void AsyncRows(bf16* dst, const bf16* base, const TensorStrides& s,
                                 const Chunk& c, int h, int col0) {
  ChunkRowsCopy(s, c, h).Issue(dst, base, col0);
}

// The intra-chunk scores P (the caller's intra_scores), kept from the forward for the backward:
// [chunks, H, 64, 64] bf16.
inline size_t ScoresBytes(const ChunkGatedParams& p, int chunks) {
  return static_cast<size_t>(chunks) * p.heads * kBT * kBT * sizeof(bf16);
}
__device__ inline int64_t ScoresOffset(const ChunkGatedParams& p, int global, int h) {
  return (int64_t{global} * p.heads + h) * kBT * kBT;
}

// Asynchronous copy of a 64 x 64 block of a row-major bf16 matrix with leading dimension ld.
__device__ inline void AsyncBlock(bf16* dst, const bf16* src, int64_t ld) {
  ForBlockItems<kThreads, kBT * 8>([&](int idx) {
    const int r = idx / 8, c8 = idx % 8;
    __pipeline_memcpy_async(dst + r * kLdBf16 + c8 * 8, src + r * ld + c8 * 8, 16);
  });
}

// Asynchronous copy of state rows [k0, k0 + 64) x columns [v0, v0 + 64) of chunk `global`.
// The tile's origin is formed once in 64 bits, each piece's offset from it in 32 (a 64-bit
// offset per piece took 48 more instructions in HeadChunkGradQKKernel, and its last spill).
__device__ inline void AsyncStateTile(bf16* dst, const bf16* states, const ChunkGatedParams& p,
                                      int global, int h, int k0, int v0) {
  const bf16* tile = states + StateOffset(p, global, h, k0, v0);
  ForBlockItems<kThreads, kBK * 8>([&](int idx) {
    const int r = idx / 8, c8 = idx % 8;
    __pipeline_memcpy_async(dst + r * kLdBf16 + c8 * 8, tile + (r * p.v_dim + c8 * 8), 16);
  });
}

// The dq/dk kernels' V slice j (columns [64 j, 64 j + 64)), four tiles from `stage` on: d_o, v,
// and the rows [k0, k0 + 64) of the chunk's state h_c and of its gradient dh_c.
__device__ inline void AsyncGradSlice(bf16* stage, const ChunkGatedParams& p, const Chunk& c, int h,
                                      int k0, int j, const bf16* states, const bf16* d_states) {
  AsyncRows(stage, p.d_o, p.v_strides, c, h, j * kBK);
  AsyncRows(stage + kTileElems, p.v, p.v_strides, c, h, j * kBK);
  AsyncStateTile(stage + 2 * kTileElems, states, p, c.global, h, k0, j * kBK);
  AsyncStateTile(stage + 3 * kTileElems, d_states, p, c.global, h, k0, j * kBK);
}

// The head gate's intra-chunk scores (or their gradient) in place: kept for j <= i, decayed by
// 2^(G_i - G_j) (an exponent <= 0 there) and times scale; zero above the diagonal.
// A lane's elements lie on four rows and four columns, whose gate values it loads once each.
__device__ inline void MaskAndDecayScores(tile::Acc64& scores, const float* G, float scale) {
  float g_row[2][2], g_col[2][2];  // [part][half], [n8][b]
#pragma unroll
  for (int k = 0; k < 2; ++k) {
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      g_row[k][m] = G[tile::Acc64::ElementRow(k, 2 * m)];
      g_col[k][m] = G[tile::Acc64::ElementCol(4 * k + m)];
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float x = scores.part[i].x[e];
      const float decay = exp2f(g_row[i][e / 2 % 2] - g_col[e / 4][e % 2]);
      scores.part[i].x[e] =
          tile::Acc64::ElementCol(e) <= tile::Acc64::ElementRow(i, e) ? x * scale * decay : 0.0f;
    }
  }
}

// Rows [0, c.rows) of a 64 x 64 accumulator into columns [col0, col0 + 64) of a [B,T,H,D] bf16
// tensor, staged through `staging` (a bf16 tile no warp still reads) for 16-byte stores.
// Synchronises.
__device__ inline void StoreAccRows(const tile::Acc64& acc, bf16* staging, bf16* base,
                                    const TensorStrides& s, const Chunk& c, int h, int col0) {
  acc.StoreBf16(staging, kLdBf16);
  __syncthreads();
  ForBlockItems<kThreads, kBT * 8>([&](int idx) {
    const int r = idx / 8, c8 = idx % 8;
    if (r < c.rows) {
      *reinterpret_cast<uint4*>(RowPtr(base, s, c.batch, c.t0 + r, h) + col0 + c8 * 8) =
          *reinterpret_cast<const uint4*>(staging + r * kLdBf16 + c8 * 8);
    }
  });
}

// Streams n slices through two stages of shared memory: issue(j) copies slice j (cp.async) into
// stage j % 2, and body(j) runs once slice j is in. The caller has committed two groups first:
// slice 0 (with whatever else the block needs from the start) and slice 1 (empty where n = 1);
// slice j + 1 (j >= 1) is issued once slice j is in, into the stage slice j - 1 left. So the
// first two slices wait on memory together, and a later one's copy overlaps the slice before.
template <typename Issue, typename Body>
__device__ inline void StreamSlices(int n, Issue issue, Body body) {
  for (int j = 0; j < n; ++j) {
    if (j == 0) {
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();  // slice j is in; every warp is done with slice j - 1's stage
    if (j >= 1) {
      if (j + 1 < n) issue(j + 1);
      __pipeline_commit();
    }
    body(j);
  }
}

// A gate tile loads in two steps, called together by LoadGate: FetchGate reads the chunk's rows
// into registers (channel gate: four threads per column, 16 rows each; head gate: one thread per
// row), CommitGate scans them into G.
template <Gate kGate>
struct GateRegs {
  float x[kGate == Gate::kChannel ? 16 : 1];
};

template <Gate kGate>
__device__ inline void FetchGate(GateRegs<kGate>& regs, const ChunkGatedParams& p, const Chunk& c,
                                 int h, int col0) {
  if constexpr (kGate == Gate::kChannel) {
    const int col = threadIdx.x % 64, part = threadIdx.x / 64;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int r = part * 16 + i;
      regs.x[i] = r < c.rows ? RowPtr(p.g, p.g_strides, c.batch, c.t0 + r, h)[col0 + col] : 0.0f;
    }
  } else {
    const int r = threadIdx.x;
    regs.x[0] = 0.0f;
    if (r < c.rows) {
      regs.x[0] =
          p.g_gamma != nullptr ? p.g_gamma[h] : *RowPtr(p.g, p.g_strides, c.batch, c.t0 + r, h);
    }
  }
}

// G = log2-scaled inclusive cumsum over the chunk's rows (per column for the channel gate);
// padded rows add 0, so row 63 holds the last valid row's value. Ends synchronised.
template <Gate kGate>
__device__ inline void CommitGate(float* G, const GateRegs<kGate>& regs) {
  if constexpr (kGate == Gate::kChannel) {
    const int col = threadIdx.x % 64, part = threadIdx.x / 64;
    float vals[16];
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      acc += regs.x[i];
      vals[i] = acc;
    }
    G[(part * 16 + 15) * kLdF32 + col] = acc;  // this part's total
    __syncthreads();
    float base = 0.0f;
    for (int q = 0; q < part; ++q) base += G[(q * 16 + 15) * kLdF32 + col];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 16; ++i) G[(part * 16 + i) * kLdF32 + col] = (base + vals[i]) * kRcpLn2;
    __syncthreads();
  } else {
    const int r = threadIdx.x;
    float x = regs.x[0];
    if (r < kBT) {
      for (int off = 1; off < 32; off *= 2) {
        const float y = __shfl_up_sync(0xffffffffu, x, off);
        if (r % 32 >= off) x += y;
      }
      G[r] = x;
    }
    __syncthreads();
    if (r >= 32 && r < kBT) x += G[31];
    __syncthreads();
    if (r < kBT) G[r] = x * kRcpLn2;
    __syncthreads();
  }
}

template <Gate kGate>
__device__ inline void LoadGate(float* G, const ChunkGatedParams& p, const Chunk& c, int h,
                                int col0) {
  GateRegs<kGate> regs;
  FetchGate<kGate>(regs, p, c, h, col0);
  CommitGate<kGate>(G, regs);
}

__device__ inline void LoadChannelGate(float* G, const ChunkGatedParams& p, const Chunk& c, int h,
                                       int col0) {
  LoadGate<Gate::kChannel>(G, p, c, h, col0);
}

__device__ inline void LoadHeadGate(float* G, const ChunkGatedParams& p, const Chunk& c, int h) {
  LoadGate<Gate::kHead>(G, p, c, h, 0);
}

template <Gate kGate>
__device__ inline float GateAt(const float* G, int r, int c) {
  if constexpr (kGate == Gate::kChannel) {
    return G[r * kLdF32 + c];
  } else {
    return G[r];
  }
}

}  // namespace flame::kernels::gated_chunk
