// The column form of the delta rule's sequential state passes (formulas in chunk_delta_steps.h):
// each warp owns 16 value columns of the state (or its gradient) and all of K. The columns evolve
// independently -- Ut = U - W S and S' = gamma_L S + K^T diag(exp(G_L - G)) Ut act on each column
// alone, and so do their gradients -- so a warp that holds whole columns never needs another
// warp's results: the block's warps share only the chunk's tiles (copied one chunk ahead into two
// sets, ColumnTileSet), and a chunk takes one block barrier, the swap of the sets.
//
// A warp holds its columns transposed, S^T (16 x K), as mma.sync-layout accumulators (WarpRows),
// and multiplies from its registers: an accumulator's lane layout is the A-fragment layout of the
// next product, and a warpgroup's four warps' fragments are the register A operand of a warpgroup
// product (kernels/common/wgmma.cuh), whose B the tensor cores read once per warpgroup from the
// shared tiles. The passes: chunk_delta_column_forward.cuh, chunk_delta_column_backward.cuh
// (sm_90a); the launcher takes them where the batch is wide enough (chunk_delta.cuh,
// UseColumnPasses), else the mma.sync passes of chunk_delta_state_pass.cuh, which tile the state
// over the warps in 16 x 16 pieces, so that each product needs the others' pieces in shared
// memory and a barrier.
//
// The scratch keeps the per-chunk states and the new values row-major ([K, V] per chunk,
// [R, H, V]): a warpgroup stores its bf16 fragments transposed into a staging tile (stmatrix) and
// copies whole rows from there (GroupStage).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/mma_tile.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_copies.cuh"
#include "kernels/delta_rule/chunk_delta_swizzled.cuh"

namespace flame::kernels::delta_chunk::tiles {

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float2 UnpackBf16(uint32_t w) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
}

// 16 rows x kCols fp32 held by one warp as mma.sync accumulators, n8 tile i holding columns
// 8 i .. 8 i + 7: lane (g, t) = (lane / 4, lane % 4) holds x[i][0..1] = (g, 8 i + 2 t .. + 1) and
// x[i][2..3] = (g + 8, the same columns).
template <int kCols>
struct WarpRows {
  static constexpr int kTiles = kCols / 8;
  float x[kTiles][4];

  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) x[i][e] = 0.0f;
    }
  }
  __device__ __forceinline__ void Scale(float f) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) x[i][e] *= f;
    }
  }
  // The bf16 A fragment (mma.m16n8k16's a0..a3) of columns 16 s .. 16 s + 15.
  __device__ __forceinline__ void Bf16A(int s, uint32_t (&a)[4]) const {
    a[0] = PackBf16(x[2 * s][0], x[2 * s][1]);
    a[1] = PackBf16(x[2 * s][2], x[2 * s][3]);
    a[2] = PackBf16(x[2 * s + 1][0], x[2 * s + 1][1]);
    a[3] = PackBf16(x[2 * s + 1][2], x[2 * s + 1][3]);
  }
  // f(i, e, at) for each element, `at` its offset in a kCols x V row-major fp32 matrix holding the
  // transpose (rows = these columns; from the warp's first value column of row 0).
  template <typename F>
  __device__ __forceinline__ static void ForTransposed(int v_dim, F f) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) f(i, e, int64_t{8 * i + 2 * t + e % 2} * v_dim + g + 8 * (e / 2));
    }
  }
};

// A warpgroup's staging tile for row-major stores of its transposed fragments: kRows rows of its
// 64 value columns (144-byte rows: stmatrix and the 16-byte reads below are conflict-free). Each
// warp puts its 16 columns; after the group's barrier, each thread copies 16-byte pieces, a warp
// instruction 4 whole 128-byte rows (per warp staging, an instruction wrote 16 rows x 32 bytes:
// 16 lines a store, and the stores' register reads queued behind them -- the pass ran ~150 us
// longer at (1, 8192, 96, 128) than with no S copy at all).
constexpr int kLdGroupStage = 72;
template <int kRows>
struct GroupStage {
  static constexpr int kBytes = kRows * kLdGroupStage * 2;
  const bf16* tile;
  uint32_t put_at;  // the lane's stmatrix row address

  __device__ explicit GroupStage(const bf16* t) : tile(t) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    put_at = ptx::SharedAddr(t + (lane % 8 + lane / 16 * 8) * kLdGroupStage + lane / 8 % 2 * 8 +
                             16 * warp);
  }
  // Rows 16 s .. 16 s + 15 of the warp's 16 columns from the A fragment a of a 16 x 16 block: row
  // j of the tile is column j of the block.
  __device__ __forceinline__ void Put(int s, const uint32_t (&a)[4]) const {
    ptx::StoreMatrix4Trans(put_at + s * 16 * kLdGroupStage * 2, a);
  }
  // The thread's first piece in a destination with rows ld apart (dst: row 0 of the group's 64
  // columns): piece t % 8 of row t / 8 (t: the thread in the group), then 16 rows on at a time.
  __device__ __forceinline__ static bf16* ThreadDst(bf16* dst, int64_t ld) {
    const int t = threadIdx.x % 128;
    return dst + t / 8 * ld + t % 8 * 8;
  }
  // Rows [0, rows) of the tile to the destination whose ThreadDst is `at` (rows ld apart); the
  // group's puts must be complete (GroupBarrier).
  __device__ __forceinline__ void CopyOut(bf16* at, int64_t ld, int rows) const {
    const int t = threadIdx.x % 128;
    const bf16* from = tile + t / 8 * kLdGroupStage + t % 8 * 8;
#pragma unroll
    for (int q = 0; q < kRows / 16; ++q) {
      if (t / 8 + 16 * q < rows) {
        *reinterpret_cast<uint4*>(at + 16 * q * ld) =
            *reinterpret_cast<const uint4*>(from + 16 * q * kLdGroupStage);
      }
    }
  }
};

// A warp's 16 x 16 blocks of a matrix it holds transposed, as A fragments (bf16; WarpRows's
// Bf16A: rows the warp's 16 value columns, columns 16 s .. 16 s + 15 of the tokens or of K), stored
// into a row-major bf16 matrix (rows ld apart) from the warp's first column: lanes g and g ^ 1
// (lane / 4) swap a fragment register (one shuffle), so that each holds two adjacent columns of
// one row -- lane (g, t) row 2 t + g % 2, columns g & ~1 and the next -- and stores them as one
// 4-byte word; a warp's store writes 8 rows x 16 bytes.
struct TransposedPairs {
  bf16* at;  // the lane's element of block 0, register 0
  int64_t ld;

  __device__ TransposedPairs(bf16* dst, int64_t row_stride)
      : at(dst + Row() * row_stride + (threadIdx.x % 32 / 4 & ~1)), ld(row_stride) {}
  __device__ static bool Odd() { return threadIdx.x % 32 / 4 % 2 != 0; }
  __device__ static int Row() { return 2 * (threadIdx.x % 4) + (Odd() ? 1 : 0); }
  // Block s of the fragment a: rows 16 s .. 16 s + 15, those from `rows` on not stored. Register
  // m holds columns g + 8 (m % 2), rows 16 s + 8 (m / 2) + 2 t and the next (low, high halves).
  __device__ __forceinline__ void Store(int s, const uint32_t (&a)[4], int rows) const {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const uint32_t other = __shfl_xor_sync(0xffffffffu, a[m], 4);
      const uint32_t pair =
          Odd() ? __byte_perm(other, a[m], 0x7632) : __byte_perm(a[m], other, 0x5410);
      const int r = 16 * s + 8 * (m / 2);
      if (Row() + r < rows) *reinterpret_cast<uint32_t*>(at + r * ld + 8 * (m % 2)) = pair;
    }
  }
};

// products(k, a) for each k step of a product whose A is the warp's state (K x 16 held as S^T),
// its bf16 fragments formed in groups of four k steps (16 registers), each group's products
// committed and waited for before the next group's fragments take the registers -- but the last
// group's, left running -- and after(k, a) for each fragment while its group runs.
template <int K, typename Products, typename After>
__device__ __forceinline__ void MultiplyState(const WarpRows<K>& state, Products products,
                                              After after) {
#pragma unroll
  for (int j = 0; j < K / 64; ++j) {
    if (j > 0) wgmma::Wait<0>();  // the group before is done with the fragments' registers
    uint32_t a[4][4];
#pragma unroll
    for (int s = 0; s < 4; ++s) state.Bf16A(4 * j + s, a[s]);
    wgmma::Fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) products(4 * j + s, a[s]);
    wgmma::Commit();
#pragma unroll
    for (int s = 0; s < 4; ++s) after(4 * j + s, a[s]);
  }
}

// MultiplyState whose fragments also go to the staging tile, for the state's per-chunk copy.
template <int K, typename Products>
__device__ __forceinline__ void MultiplyStateCopy(const WarpRows<K>& state,
                                                  const GroupStage<K>& stage, Products products) {
  MultiplyState(state, products, [&](int k, const uint32_t(&a)[4]) { stage.Put(k, a); });
}

// The barrier of warpgroup g's 128 threads (g < 2: named barrier 1 + g; 0 is __syncthreads').
// Immediate ids: with a register id the compiler reserves all 16 barriers.
__device__ __forceinline__ void GroupBarrier(int g) {
  if (g == 0) {
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  }
}

// The chunk's G (G: its row 0 in the [R,H] scratch at head h) into shared memory by the block's
// first 64 threads; rows past the end repeat the last. (IssueRowScalars does the same, and beta;
// called here it cost the passes' per-chunk copy issue 8 more instructions.)
__device__ __forceinline__ void IssueChunkG(float* dst, const float* G, int heads, int rows) {
  if (threadIdx.x < kBT) {
    const int r = static_cast<int>(threadIdx.x);
    __pipeline_memcpy_async(dst + r, G + min(r, rows - 1) * heads, 4);
  }
}

// One thread's share of copying a chunk's 64 rows x kPieces 16-byte pieces of a bf16 tensor into
// a row-major shared tile (cp.async) by kThreadsB threads: rows r0 + i kRowStep of piece column
// c, at offsets from the chunk's row 0 fixed per thread, so that a chunk's copy is its base
// pointer plus constants. Rows past the chunk's end are zero-filled.
template <int kThreadsB, int kPieces>
struct RowPieces {
  static_assert(kThreadsB % kPieces == 0 && kBT * kPieces % kThreadsB == 0, "whole rows a step");
  static constexpr int kRowStep = kThreadsB / kPieces, kCount = kBT / kRowStep;
  int r0;
  int64_t src0, src_step;   // elements from the chunk's row 0
  uint32_t dst0, dst_step;  // shared-memory bytes

  // dst: the destination tile, dst_ld bytes between its rows.
  __device__ RowPieces(int64_t row_stride, const void* dst, int dst_ld) {
    const int c = threadIdx.x % kPieces;
    r0 = threadIdx.x / kPieces;
    src0 = r0 * row_stride + 8 * c;
    src_step = kRowStep * row_stride;
    dst0 = ptx::SharedAddr(dst) + r0 * dst_ld + 16 * c;
    dst_step = kRowStep * dst_ld;
  }
  // chunk: the source's row 0; set: a byte offset added to every destination.
  __device__ __forceinline__ void Issue(const bf16* chunk, uint32_t set, int rows) const {
    const bf16* from = chunk + src0;
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const bool valid = rows == kBT || r0 + i * kRowStep < rows;
      ptx::CopyAsync16(dst0 + set + i * dst_step, valid ? from + i * src_step : chunk,
                       valid ? 16 : 0);
    }
  }
};

// x(v, tok) *= f exp(G_last - G_tok) for the lane's tokens 8 i + 2 t .. + 1 of a warp's 16 x 64
// columns (G_at: the lane's G pair of token 2 t in shared memory, the chunk's G there).
__device__ __forceinline__ void DecayTokens(WarpRows<kBT>& x, uint32_t G_at, float G_last,
                                            float f = 1.0f) {
  const float G_last2 = G_last * ptx::kRcpLn2;
#pragma unroll
  for (int i = 0; i < WarpRows<kBT>::kTiles; ++i) {
    const float2 G = ptx::LoadShared2(G_at + 4 * 8 * i);
    const float d0 = f * ptx::Exp2(fmaf(-G.x, ptx::kRcpLn2, G_last2));
    const float d1 = f * ptx::Exp2(fmaf(-G.y, ptx::kRcpLn2, G_last2));
    x.x[i][0] *= d0, x.x[i][2] *= d0;
    x.x[i][1] *= d1, x.x[i][3] *= d1;
  }
}

// x(v, tok) *= exp(G_tok) (the queries' gamma) for the lane's tokens, as DecayTokens (kTokens: the
// chunk's 64, or a half of them with G_at moved to the half's first token).
template <int kTokens>
__device__ __forceinline__ void ScaleTokensByGamma(WarpRows<kTokens>& x, uint32_t G_at) {
#pragma unroll
  for (int i = 0; i < WarpRows<kTokens>::kTiles; ++i) {
    const float2 G = ptx::LoadShared2(G_at + 4 * 8 * i);
    const float d0 = ptx::Exp2(G.x * ptx::kRcpLn2), d1 = ptx::Exp2(G.y * ptx::kRcpLn2);
    x.x[i][0] *= d0, x.x[i][2] *= d0;
    x.x[i][1] *= d1, x.x[i][3] *= d1;
  }
}

// The warp's 16 columns of a chunk's 64-row bf16 value tile (U or dO: row-major, rows ld_bytes
// apart), transposed, as fp32 accumulators x (rows the columns, columns the tokens), from at: the
// lane's transposed-ldmatrix address of the tile's row 0 (the columns' pass's u_at / o_at).
__device__ __forceinline__ void LoadTransposedValues(WarpRows<kBT>& x, uint32_t at, int ld_bytes) {
#pragma unroll
  for (int s = 0; s < kBT / 16; ++s) {
    uint32_t f[4];
    ptx::LoadMatrix4Trans(f, at + s * 16 * ld_bytes);
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const float2 v = UnpackBf16(f[m]);
      float* e = x.x[2 * s + m / 2] + 2 * (m % 2);
      e[0] = v.x, e[1] = v.y;
    }
  }
}

// dO'^T = (scale diag(gamma) dO)^T's bf16 A fragments (out; the warp's 16 columns, tokens 16 s ..)
// from dO^T's (in; may be out), rounded to bf16 again: gamma = exp(G) of the lane's tokens where
// b.gated (G_at as DecayTokens'), else 1; kMaybeGated false: a pass that runs only ungated. (The
// scale and the flag read from the kernel's parameters where they are used: passed in as values,
// they held registers through the passes' products.)
template <bool kMaybeGated = true>
__device__ __forceinline__ void ScaleOutputGradFragments(const uint32_t (&in)[kBT / 16][4],
                                                         uint32_t (&out)[kBT / 16][4],
                                                         uint32_t G_at, const StepBase& b) {
#pragma unroll
  for (int s = 0; s < kBT / 16; ++s) {
    float f[2][2];  // tokens 16 s + 8 hi + 2 t + b
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      if (kMaybeGated && b.gated) {
        const float2 Gp = ptx::LoadShared2(G_at + 4 * (16 * s + 8 * hi));
        f[hi][0] = b.p.scale * ptx::Exp2(Gp.x * ptx::kRcpLn2);
        f[hi][1] = b.p.scale * ptx::Exp2(Gp.y * ptx::kRcpLn2);
      } else {
        f[hi][0] = f[hi][1] = b.p.scale;
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float2 x = UnpackBf16(in[s][r]);
      out[s][r] = PackBf16(x.x * f[r / 2][0], x.y * f[r / 2][1]);
    }
  }
}

// One chunk's tiles of a column pass: kKeyTiles 64 x K bf16 operands (forward: the keys, W and,
// where it writes o, the queries; backward: the keys, the queries and W) and kMats 64 x 64 bf16
// chunk matrices (M, for the gated rule's passes that read it: the backward, and the forward where
// it writes o; the ungated rule's form it, FormChunkMat), all as swizzled tiles
// (chunk_delta_swizzled.cuh: an operand's K / 64 column tiles one after another, copied by the
// copy engine, TileGroup), then the block's kBV value columns of a 64-row bf16 operand (forward U,
// backward dO; row-major, leading dimension kBV + 8, by cp.async) and G. A set is 1024-byte
// aligned, as the swizzle needs.
template <int K, int kBV, int kKeyTiles, int kMats = 0>
struct ColumnTileSet {
  static constexpr int kLdValues = kBV + 8;
  static constexpr int kKeyBytes = kBT * K * 2, kValueBytes = kBT * kLdValues * 2;
  // Byte offsets in a set: key operand i, the chunk matrices, the value columns, G.
  __host__ __device__ static constexpr int Key(int i) { return i * kKeyBytes; }
  static constexpr int kMat = kKeyTiles * kKeyBytes;
  static constexpr int kValues = kMat + kMats * kSwizzledTileBytes, kG = kValues + kValueBytes;
  static constexpr int kBytes = AlignSwizzled(kG + kBT * 4);
  static constexpr int kTiles = kKeyTiles * K / kBT + kMats;  // swizzled tiles
};

// Shared memory of a column pass: the alignment's slack, two tile sets, each warpgroup's staging
// tiles (K rows and 64), and the sets' copy barriers.
template <int K, int kBV, int kKeyTiles, int kMats = 0>
inline constexpr size_t ColumnPassSmem() {
  return kSwizzleAlign + 2 * ColumnTileSet<K, kBV, kKeyTiles, kMats>::kBytes +
         kBV / 64 * size_t{kLdGroupStage} * 2 * (K + kBT) + kCopyBarrierBytes;
}

// The descriptor steps of a column pass's swizzled B operands: a K-major operand's k step (16 of
// its 64 nk columns: 32 bytes within a tile, tiles kSwizzledTileBytes apart) and an N-major one's
// (16 token rows, 2048 bytes), in the descriptor's 16-byte units.
__device__ __forceinline__ uint64_t KMajorStep(int k) {
  return (k / 4) * (kSwizzledTileBytes / 16) + (k % 4) * 2;
}
__device__ __forceinline__ uint64_t NMajorStep(int s) { return s * (16 * 128 / 16); }

// The ungated rule's M = tril(Q K^T), formed by a warpgroup of a column pass on its own from the
// chunk's query and key tiles (q, k: the descriptors of their first K-major swizzled tiles, K / 64
// tiles each) instead of read: ChunkPrepare then neither reads the queries nor writes M, and the
// passes read 8 KB a chunk and head less, for one more 64 x 64 x K product each. (The gated rule's
// M, with its decays exp(G_r - G_c), its RowTerms reads too; formed so in the passes, its decays
// on their chains, the passes took 86 and 114 us more at (1, 8192, 96, 128).) FormChunkMat issues
// the product; PutChunkMat, once it is waited for, puts M into the warpgroup's swizzled tile (tile:
// its shared address) for the products that read it, after a barrier of the group (GroupBarrier).
template <int K>
__device__ __forceinline__ void FormChunkMat(GroupAcc64& m, uint64_t q, uint64_t k) {
  m.Zero();  // (before the fence: zeros set after it made ptxas wait for the products before)
  wgmma::Fence();
#pragma unroll
  for (int s = 0; s < K / 16; ++s) {
    wgmma::MmaSharedA64<false>(m.d, q + KMajorStep(s), k + KMajorStep(s));
  }
  wgmma::Commit();
}
__device__ __forceinline__ void PutChunkMat(GroupAcc64& m, uint32_t tile, int rows) {
  DecayLowerTriangle<false>(m, nullptr, rows);
  m.PutSwizzled(tile);
  wgmma::FenceSharedForProducts();
}

}  // namespace flame::kernels::delta_chunk::tiles
