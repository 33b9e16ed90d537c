// Tiles of the sm_90a delta-rule kernels that multiply on warpgroup products (wgmma): 64 x 64 bf16
// tiles in the 128-byte swizzle layout, which the tensor cores read as B in either orientation
// (wgmma::DescriptorSwizzle128) and warps read as A by ldmatrix, their cp.async copies, and the
// warpgroup's accumulator layout, for RowTermsWgmmaKernel (chunk_delta_row_terms_wgmma.cuh) and
// the next such kernel; and the mma.sync state passes' tiles in the same layout, copied by the
// copy engine on sm_90 (TileGroup). A kernel places these tiles at 1024-byte aligned shared
// addresses (the swizzle's period, which the hardware takes from the address bits;
// AlignedSharedBase).
#pragma once

#include <cuda.h>  // CUtensorMap (a type only)
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

// ----------------------------------------------------------------------------------------------
// The mma.sync state passes' chunk tiles (the keys, the queries, W, M; chunk_delta_state_pass.cuh):
// swizzled tiles, 8 KB each, read by SwizzledAOperand. On sm_90 the copy engine moves them (TMA:
// one instruction a tile by one thread, counted on the group's mbarrier), where cp.async took an
// instruction per 16 bytes on every thread, plus their addresses, on the chain of warps that issue
// in order. Measured on the H200 (per pass call, (2, 16384, 16, 128) and (8, 4096, 8, 256)): with
// those copies left out the passes took 26-29% less time; by the copy engine 17-19% less (578 ->
// 482, 595 -> 480, 675 -> 567, 731 -> 633 us); by the copy engine row by row instead (128-byte
// bulk copies, 448 a chunk at K = 128) 70% more -- its cost is per copy, not per byte. Before
// sm_90, and with portable_kernels (StepBase::tile_copies false), cp.async pieces to the same
// layout, in the threads' commit groups.

constexpr int kSwizzledTile = kBT * kBT;  // elements of a swizzled tile
constexpr int kSwizzleAlign = 1024;       // the 128-byte swizzle's period
__host__ __device__ constexpr int AlignSwizzled(int bytes) {
  return (bytes + kSwizzleAlign - 1) / kSwizzleAlign * kSwizzleAlign;
}

// The mbarrier of a group of tile copies in shared memory, one phase per issue of the group, where
// the copy engine runs them (`engine`: sm_90 and StepBase::tile_copies); else unused, the copies
// cp.async in the threads' commit groups.
struct CopyBarrier {
  uint32_t addr;
  bool engine;

  __device__ CopyBarrier(uint64_t* at, bool tile_copies)
      : addr(ptx::SharedAddr(at)),
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        engine(tile_copies) {
  }
#else
        engine(false) {
    (void)tile_copies;
  }
#endif
  // By one thread, before the block barrier that precedes the group's first issue.
  __device__ void Init() const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (engine) {
      ptx::MbarrierInit(addr, 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
#endif
  }
  // Until the group's issue number n (from 0) has landed: phase parity n % 2.
  __device__ void Wait(int n) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (engine) ptx::MbarrierWait(addr, n & 1);
#endif
  }
};
// Shared memory a kernel reserves for its copy groups' barriers (four at most).
constexpr int kCopyBarrierBytes = 4 * sizeof(uint64_t);

// One issue of a group of tiles: by the copy engine (bar.engine) one thread (`issuer`, thread 0
// unless given) announces their bytes on the group's barrier (`tiles` of them) and copies them;
// else every thread copies its pieces
// (cp.async, in its commit group). Destinations are shared addresses of swizzled tiles.
struct TileGroup {
  CopyBarrier bar;
  unsigned issuer;  // the thread that issues the engine's copies

  __device__ TileGroup(CopyBarrier b, int tiles, unsigned issuing_thread = 0)
      : bar(b), issuer(issuing_thread) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (bar.engine && threadIdx.x == issuer) {
      ptx::MbarrierArriveExpectTx(bar.addr, tiles * kSwizzledTileBytes);
    }
#else
    (void)tiles;
#endif
  }
  // nk tiles of a chunk's rows of a [R, H, D] token tensor, columns col0 + 64 j: its map
  // (coordinates (col0 + 64 j, h, row): row the chunk's first flat token row), or src (the chunk's
  // row 0 at head h and column col0, rows row_stride apart; rows past `rows` zero-filled).
  __device__ void Token(uint32_t dst, const CUtensorMap* map, int col0, int nk, int h, int row,
                        const bf16* src, int64_t row_stride, int rows) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (bar.engine) {
      if (threadIdx.x == issuer) {
        for (int j = 0; j < nk; ++j) {
          ptx::TmaLoad3D(dst + j * kSwizzledTileBytes, map, col0 + j * kBT, h, row, bar.addr);
        }
      }
      return;
    }
#endif
    for (int j = 0; j < nk; ++j) {
      IssueSwizzledTile(dst + j * kSwizzledTileBytes, src + j * kBT, row_stride, rows);
    }
  }
  // A 64 x 64 block of a row-major matrix (a chunk matrix, a state's slice): its map (coordinates
  // (col, row) of the block's first element), or src (that element; rows row_stride apart).
  __device__ void Block(uint32_t dst, const CUtensorMap* map, int col, int64_t row, const bf16* src,
                        int64_t row_stride) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (bar.engine) {
      if (threadIdx.x == issuer) ptx::TmaLoad2D(dst, map, col, static_cast<int>(row), bar.addr);
      return;
    }
#endif
    IssueSwizzledTile(dst, src, row_stride, kBT);
  }
};

// On sm_90, zeroes rows [rows, 64) of nk swizzled tiles (by a block of kThreadsB) after their copy
// landed (the copy engine reads a box's rows past a sequence's end from the next sequence, where
// cp.async zero-filled them; the passes' products need them zero), and orders the zeros before the
// tiles' later copies. Whole rows: the swizzle keeps a row's pieces within its 128 bytes. Only
// after the engine's copies: cp.async zero-fills those rows itself (zeroing them again raced with
// it).
template <int kThreadsB = kThreads>
__device__ inline void ZeroRowsPast(bf16* tiles, int nk, int rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int pieces = (kBT - rows) * 8;
  for (int idx = threadIdx.x; idx < nk * pieces; idx += kThreadsB) {
    const int j = idx / pieces, at = rows * kBT + idx % pieces * 8;
    *reinterpret_cast<uint4*>(tiles + j * kSwizzledTile + at) = make_uint4(0, 0, 0, 0);
  }
  ptx::FenceProxyAsync();
#else
  (void)tiles, (void)nk, (void)rows;
#endif
}

// A warpgroup's 64 x kCols fp32 accumulator (wgmma m64nkCols): warp w of the group holds rows
// 16 w .. 16 w + 15, lane (g, t) = (lane / 4, lane % 4) element d[4 j + 2 h + b] = C(16 w + g + 8
// h, 8 j + 2 t + b). Columns 16 m .. 16 m + 15 are a WarpAcc16 of the same lane layout. (A warp's
// part of a 64-column one is WarpRows<64>'s layout, chunk_delta_columns.cuh, which holds a warp's
// transposed state columns; this one is a whole tile in row form, with its rows' places and
// stores.) GroupAcc64: RowTermsWgmmaKernel's; GroupAcc32 (chunk_delta_rows.cuh): the row-form
// state passes'.
template <int kCols>
struct GroupAcc {
  static constexpr int kTiles = kCols / 8;  // n8 tiles
  float d[kCols / 2];

  __device__ __forceinline__ static int Row(int h) {
    return 16 * (threadIdx.x / 32 % 4) + threadIdx.x % 32 / 4 + 8 * h;
  }
  __device__ __forceinline__ static int Col(int j) { return 8 * j + 2 * (threadIdx.x % 4); }
  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int e = 0; e < kCols / 2; ++e) d[e] = 0.0f;
  }
  // Each row's elements times f(row).
  template <typename F>
  __device__ __forceinline__ void ScaleRows(F f) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float s = f(Row(h));
#pragma unroll
      for (int j = 0; j < kTiles; ++j) d[4 * j + 2 * h] *= s, d[4 * j + 2 * h + 1] *= s;
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
    for (int m = 0; m < kCols / 16; ++m) {
      Piece(m).StoreBf16Global16B(dst + r0 * ld + 16 * m, ld, rows - r0);
    }
  }
  // The warp's 16 rows (kCols = 64), rounded to bf16, into a swizzled 64 x 64 tile at shared
  // address `tile` (stmatrix; the swizzle keeps a matrix's eight rows in different banks).
  __device__ __forceinline__ void PutSwizzled(uint32_t tile) const {
    static_assert(kCols == 64, "a 64 x 64 tile");
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32 % 4, m = lane / 8;
    // The lane gives the address of row lane % 8 of matrix m: h = m % 2, n8 tile 2 q + m / 2.
    const uint32_t put = tile + (16 * w + 8 * (m % 2) + lane % 8) * 128;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t a[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 x = __floats2bfloat162_rn(d[4 * (2 * q + i / 2) + 2 * (i % 2)],
                                                       d[4 * (2 * q + i / 2) + 2 * (i % 2) + 1]);
        a[i] = *reinterpret_cast<const uint32_t*>(&x);
      }
      ptx::StoreMatrix4(put + (((2 * q + m / 2) ^ lane % 8) << 4), a);
    }
  }
  // The same (kCols = 64) through a swizzled tile that no product reads any more (tile: its shared
  // address, tile_at: its generic pointer): each warp puts its 16 rows (PutSwizzled), then stores
  // them in 16-byte pieces, a warp instruction four whole 128-byte rows. Only the warp's own rows:
  // no barrier but the warp's. (StoreRows's quad trades take about three times the instructions.)
  __device__ __forceinline__ void StoreRowsVia(uint32_t tile, const char* tile_at, bf16* dst,
                                               int64_t ld, int rows) const {
    PutSwizzled(tile);
    __syncwarp();
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32 % 4;
    // Rows r0 + 4 i, piece lane % 8: rows 4 apart alternate their swizzle by 4 pieces.
    const int r0 = 16 * w + lane / 8, piece = lane % 8;
    const char* get = tile_at + r0 * 128;
    const int swizzled[2] = {(piece ^ r0 % 8) << 4, (piece ^ r0 % 8 ^ 4) << 4};
    bf16* out = dst + r0 * ld + 8 * piece;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (r0 + 4 * i < rows) {
        *reinterpret_cast<uint4*>(out + 4 * i * ld) =
            *reinterpret_cast<const uint4*>(get + 4 * i * 128 + swizzled[i % 2]);
      }
    }
  }
  // The same in fp32, a pair of columns per store (a warp's store: 8 rows x 32 whole bytes).
  __device__ __forceinline__ void StoreRows(float* dst, int64_t ld, int rows) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = Row(h);
      if (r >= rows) continue;
      float* row = dst + r * ld + Col(0);
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        *reinterpret_cast<float2*>(row + 8 * j) =
            make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
    }
  }
};
using GroupAcc64 = GroupAcc<64>;

// A chunk's 64 x 64 product of its tokens with themselves (QK = Q K^T or KK = K K^T), in place:
// each element (r, col) times the decay exp(G_r - G_col) (kGated; G: the chunk's, in shared
// memory) on and below the diagonal, zero above it and in rows past `rows` (selects: computed past
// the diagonal, where G_r - G_col > 0, the decay may be infinite). For QK: M.
template <bool kGated>
__device__ __forceinline__ void DecayLowerTriangle(GroupAcc64& acc, const float* G, int rows) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = GroupAcc64::Row(half);
    const float g_r = kGated ? G[r] : 0.0f;
#pragma unroll
    for (int j = 0; j < GroupAcc64::kTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = GroupAcc64::Col(j) + e;
        float& x = acc.d[4 * j + 2 * half + e];
        const float decayed = kGated ? x * __expf(g_r - G[col]) : x;
        x = r < rows && col <= r ? decayed : 0.0f;
      }
    }
  }
}

// A warp's bf16 A fragments (16 rows, one 16-deep k step at a time) of a swizzled tile, by
// ldmatrix: rows offset .. offset + 15 of the tile, or with kTrans its transpose's (A(i, l) =
// tile(l, offset + i)); offset a multiple of 8. By default a warpgroup's warp w takes offset 16 w.
// Matrix m of a fragment is rows + 8 (m % 2), k + 8 (m / 2); lane l gives the address of its row
// l % 8. A step moves a plain A's pieces (the XOR: the lane's own piece is bit 0, the step's even)
// and a transposed A's rows, 16 at a time, which keeps each row's swizzle.
template <bool kTrans>
struct SwizzledAOperand {
  uint32_t row;    // the lane's row address (kTrans: at step 0)
  uint32_t piece;  // kTrans: its piece's offset; else the piece index before the step's XOR

  __device__ SwizzledAOperand(uint32_t tile, int offset) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    if (kTrans) {  // tile rows l = 16 s + 8 (m / 2) + lane % 8, piece offset / 8 + m % 2
      row = tile + (8 * (m / 2) + lane % 8) * 128;
      piece = ((offset / 8 + m % 2) ^ lane % 8) << 4;
    } else {  // tile rows offset + 8 (m % 2) + lane % 8, piece 2 s + m / 2
      row = tile + (offset + 8 * (m % 2) + lane % 8) * 128;
      piece = m / 2 ^ lane % 8;
    }
  }
  __device__ explicit SwizzledAOperand(uint32_t tile)
      : SwizzledAOperand(tile, 16 * (static_cast<int>(threadIdx.x) / 32 % 4)) {}
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
