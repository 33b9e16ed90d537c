// The sequential state passes of the chunked delta rule (formulas in chunk_delta_steps.h) on
// mma.sync, one block per (V slice of kBV = 32 or 64, head, sequence), the K x kBV state slice
// held in registers in fp32. (On the H100/H200, batches wide enough at K <= 128 take the column
// form on warpgroup products instead: chunk_delta_columns.cuh; narrower ones the row form,
// chunk_delta_rows.cuh; and at K = 256 the column form too where it runs in fewer waves,
// chunk_delta_column_{forward,backward}_split.cuh.) Slices of 32 give twice the blocks,
// which the small shapes need: a (4, 2048, 16, 128) batch has only 4 x 16 sequence-heads to spread
// over 132 multiprocessors; slices of 64 halve the waves where the blocks do not fit at once. The
// launcher picks by waves (chunk_delta.cuh, PickVariant). Measured on the H200: (8, 4096, 8, 256)
// forward + backward 4.38 -> 3.73 ms, both passes at 64 columns; (1, 8192, 96, 128)'s forward pass
// only 588 -> 578 us though its 384 blocks of 32 columns took two waves and its 192 of 64 take one:
// a multiprocessor that holds two 64-column blocks does the work of four 32-column ones, so the
// pass is bound by each multiprocessor's throughput there, not by the waves.
//
// The passes are latency-bound: per chunk they multiply a few 64 x 64 tiles with the state, and
// every chunk waits for the one before. So all of a chunk's tiles are copied into shared memory
// while the chunk before is computed (on sm_90 by the copy engine, chunk_delta_swizzled.cuh's
// TileGroup; cp.async before): two sets of tile buffers, one being read, one being filled, and
// one block barrier per chunk orders the swap.
//
// The chunk's K x 64 operands are the keys, the queries and W = T diag(beta gamma) K (written by
// ChunkPrepare), all bf16 (half the copy, half the shared memory; without the l2norm the keys and
// queries are the inputs, exact). The products over K take bf16 copies of the state (or its
// gradient) and of the update's right-hand sides: bf16 tensor-core products, each operand
// fragment one ldmatrix, as fla's kernels do. The state itself is carried, stored and summed in
// fp32: only its copy for the next chunk's products is rounded. That bf16 copy is also the
// per-chunk state (or gradient) the later kernels read: copied from shared memory to the scratch
// in 16-byte pieces, half the bytes of an fp32 store and a few instructions instead of a store
// per accumulator pair. With W on chip, W S and W^T dUt are single products, and with the
// backward's chunk-local M^T dO computed beforehand for all chunks, a chunk takes two barriers in
// either pass. (Formed from T and the keys -- W S = T (diag(beta gamma) K S) -- they took a third
// product, with its own barrier, per chunk. At (1, 8192, 96, 128) on the H200 the forward pass
// went from 868 to 672 us and the backward from 1543 to 1387, for 722 -> 880 us of ChunkPrepare,
// which writes W.)
//
// Each warp owns fixed 16 x 16 tiles of the state and of the chunk's 64 x 32 products and
// accumulates them in registers; a product whose operand another warp wrote needs a barrier.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/delta_rule/chunk_delta_copies.cuh"
#include "kernels/delta_rule/chunk_delta_swizzled.cuh"
#include "kernels/delta_rule/chunk_delta_tiles.cuh"

namespace flame::kernels::delta_chunk::tiles {

using tile::WarpAcc16;

// A block's value columns, kBV = 32 or 64, as a template parameter of the passes: 32 gives twice
// the blocks, which the small shapes need to fill the multiprocessors; 64 halves the blocks where
// they run in more than one wave, and each block's copies of the keys and W serve twice the
// columns (the launcher picks by waves, PickVariant). The bf16 operands (state copies, the
// update's right-hand sides) are read by ldmatrix with rows padded by 16 bytes (80 or 144 bytes
// apart: conflict-free). (64-wide chunk tiles: kLd, kLdT.)
template <int kBV>
__host__ __device__ constexpr int LdSb() {
  static_assert(kBV == 32 || kBV == 64, "32 or 64 value columns per block");
  return kBV + 8;
}
// 16 x 16 tiles per warp across a block's columns: warp w's tiles of a 64 x kBV chunk product are
// at rows WarpRow(), columns WarpCol() + 32 t, t < kBV / 32.
template <int kBV>
__host__ __device__ constexpr int ColumnTiles() {
  return kBV / 32;
}
__device__ __forceinline__ int WarpRow() { return threadIdx.x / 32 / 2 * 16; }
__device__ __forceinline__ int WarpCol() { return threadIdx.x / 32 % 2 * 16; }
__device__ __forceinline__ int LaneRow() { return WarpRow() + WarpAcc16::LaneRow(); }

// Multiplies the lane's rows of a warp tile by top (row LaneRow()) and bottom (LaneRow() + 8).
__device__ __forceinline__ void ScaleRows(WarpAcc16& acc, float top, float bottom) {
#pragma unroll
  for (int e = 0; e < 8; ++e) acc.x[e] *= e / 2 % 2 ? bottom : top;
}

// The lane's elements of the warp tile of a [R,H,V] scratch tensor at the chunk's row 0 and the
// block's column v0 <-> registers, two adjacent columns per access; rows past the chunk's end
// load as zero and are not stored. U, the new values and their gradients are bf16 (in fp32 they
// were the passes' largest per-chunk transfers; fla keeps them in bf16 too); the chunk-local
// part of the gradient, MtdO, is fp32. Loaded pairs stay packed until used: unpacked at the load,
// they made the chunk that issues the next chunk's load wait for it (StateForward 672 -> 828 us
// at (1, 8192, 96, 128)).
template <typename Element>
struct RowPairs {
  static constexpr bool kF32 = std::is_same_v<Element, float>;
  using Pair = std::conditional_t<kF32, float2, __nv_bfloat162>;
  Pair x[4];  // pair 2 h + half: columns 8 h + LaneCol() (+1) of row LaneRow() + 8 half

  __device__ void Load(const Element* src, int64_t ld, int rows) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = LaneRow() + 8 * half;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (r < rows) {
          x[2 * h + half] = *reinterpret_cast<const Pair*>(src + r * ld + WarpCol() + 8 * h +
                                                           WarpAcc16::LaneCol());
        } else if constexpr (kF32) {
          x[2 * h + half] = make_float2(0.0f, 0.0f);
        } else {
          x[2 * h + half] = __floats2bfloat162_rn(0.0f, 0.0f);
        }
      }
    }
  }
  // Element e of the warp tile's accumulator layout.
  __device__ float operator[](int e) const {
    float2 v;
    if constexpr (kF32) {
      v = x[e / 2];
    } else {
      v = __bfloat1622float2(x[e / 2]);
    }
    return e % 2 ? v.y : v.x;
  }
};
__device__ inline void StoreRows(bf16* dst, int64_t ld, const WarpAcc16& acc, int rows) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = LaneRow() + 8 * half;
    if (r >= rows) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      *reinterpret_cast<__nv_bfloat162*>(dst + r * ld + WarpCol() + 8 * h + WarpAcc16::LaneCol()) =
          __floats2bfloat162_rn(acc.x[4 * h + 2 * half], acc.x[4 * h + 2 * half + 1]);
    }
  }
}

// acc[t] += A B_t, a 64-deep product for each of the warp's kT column tiles (B_t: columns 32 t of
// b, row-major, at the warp's first column WarpCol()), each fragment of A (a swizzled tile at row,
// or with kTrans column, a_offset) loaded once for all of them. (The passes' shared-memory loads
// are mostly ldmatrix's, and their LSU data pipe is busy: 80% in StateForwardKernel<2, 32, true>
// at (2, 16384, 16, 128) by ncu. Loading each fragment once -- here, in ProductBf16Pair and in
// AddTransposedProductBf16 -- took StateForwardKernel<4, 64, true> at (8, 4096, 8, 256) from 583
// to 573 us and left the others as they were.)
template <bool kTrans, int kT>
__device__ __forceinline__ void MmaSwizzledColumns(WarpAcc16 (&acc)[kT], const bf16* a_tile,
                                                   int a_offset, const bf16* b, int ldb) {
  const SwizzledAOperand<kTrans> ao(ptx::SharedAddr(a_tile), a_offset);
#pragma unroll
  for (int s = 0; s < kBT / 16; ++s) {
    uint32_t fa[4];
    ao.Load(fa, 0, s);
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const tile::Bf16BOperand<true> bo(b + 32 * t, ldb);
      uint32_t fb[4];
      bo.Load(fb, 16 * s);
      tile::MmaWarp16Step(acc[t], fa, fb);
    }
  }
}

// The K x kBV state slice of a block (K = 64 kNk), in registers: warp w holds, for each 64-row
// slice j of K, the 16 x 16 tiles at rows 64 j + WarpRow(), columns WarpCol() + 32 t. So the
// chunk's j-th 64-wide tile of K (or Q) updates kBV / 32 tiles per warp. The passes are
// instantiated per kNk: with K a run-time value every kernel kept registers for K = 256 (the
// backward pass 158, one block per multiprocessor).
template <int kNk, int kBV>
struct StateTiles {
  static constexpr int kT = ColumnTiles<kBV>(), kLdSb = LdSb<kBV>();
  WarpAcc16 part[kNk][kT];

  __device__ static int Row(int j) { return j * kBT + WarpRow(); }
  __device__ static int Col(int t) { return WarpCol() + 32 * t; }
  // f(j, t, e, at) for each pair (x[e], x[e + 1]) of part[j][t] the lane holds, `at` its
  // element offset in a K x V fp32 state from the block's column 0 of row 0 (rows v_dim apart).
  template <typename F>
  __device__ static void ForGlobalPairs(int v_dim, F f) {
#pragma unroll
    for (int j = 0; j < kNk; ++j) {
#pragma unroll
      for (int t = 0; t < kT; ++t) {
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
          const int r = Row(j) + WarpAcc16::LaneRow() + 8 * (e / 2 % 2);
          const int c = Col(t) + 8 * (e / 4) + WarpAcc16::LaneCol();
          f(j, t, e, int64_t{r} * v_dim + c);
        }
      }
    }
  }
  // From / to the block's columns of a K x V fp32 state in global memory (src at row 0, the
  // block's column 0; null: zeros), the lane's own elements, two adjacent columns per access:
  // once per block, so no staging through shared memory.
  __device__ void LoadGlobal(const float* src, int v_dim) {
    ForGlobalPairs(v_dim, [&](int j, int t, int e, int64_t at) {
      const float2 v = src ? *reinterpret_cast<const float2*>(src + at) : make_float2(0.0f, 0.0f);
      part[j][t].x[e] = v.x, part[j][t].x[e + 1] = v.y;
    });
  }
  __device__ void StoreGlobal(float* dst, int v_dim) const {
    ForGlobalPairs(v_dim, [&](int j, int t, int e, int64_t at) {
      *reinterpret_cast<float2*>(dst + at) = make_float2(part[j][t].x[e], part[j][t].x[e + 1]);
    });
  }
  // To a bf16 K x kBV slice in shared memory (leading dimension kLdSb): own tiles only (the
  // products' copy; the registers keep fp32).
  __device__ void StoreBf16(bf16* s) const {
#pragma unroll
    for (int j = 0; j < kNk; ++j) {
#pragma unroll
      for (int t = 0; t < kT; ++t) part[j][t].StoreBf16(s + Row(j) * kLdSb + Col(t), kLdSb);
    }
    __syncwarp();
  }
  __device__ void Scale(float f) {
#pragma unroll
    for (int j = 0; j < kNk; ++j) {
#pragma unroll
      for (int t = 0; t < kT; ++t) part[j][t].Scale(f);
    }
  }
  // part[j][t] += (64-wide tile j of a bf16 [64 x K] chunk operand)^T b, b a 64 x kBV bf16 tile
  // (leading dimension kLdSb). Each B fragment of b is loaded once for every j (see
  // MmaSwizzledColumns).
  __device__ void AddTransposedProductBf16(const bf16* tiles, const bf16* b) {
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const tile::Bf16BOperand<true> bo(b + Col(t), kLdSb);
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) {
        uint32_t fb[4];
        bo.Load(fb, 16 * s);
#pragma unroll
        for (int j = 0; j < kNk; ++j) {
          const SwizzledAOperand<true> ao(ptx::SharedAddr(tiles + j * kSwizzledTile), WarpRow());
          uint32_t fa[4];
          ao.Load(fa, 0, s);
          tile::MmaWarp16Step(part[j][t], fa, fb);
        }
      }
    }
  }
  // acc[t] += (a bf16 [64 x K] chunk operand) S, with S's bf16 copy s (leading dimension kLdSb):
  // the warp's tiles of a 64 x kBV product.
  __device__ static void ProductBf16(WarpAcc16 (&acc)[kT], const bf16* tiles, const bf16* s) {
#pragma unroll
    for (int j = 0; j < kNk; ++j) {
      MmaSwizzledColumns<false>(acc, tiles + j * kSwizzledTile, WarpRow(),
                                s + j * kBT * kLdSb + WarpCol(), kLdSb);
    }
  }
  // ProductBf16 for two operands at once, a0 and a1 (acc0 += A0 S, acc1 += A1 S): each B
  // fragment of S and each A fragment loaded once, the accumulator chains independent.
  __device__ static void ProductBf16Pair(WarpAcc16 (&acc0)[kT], WarpAcc16 (&acc1)[kT],
                                         const bf16* a0, const bf16* a1, const bf16* s) {
#pragma unroll
    for (int j = 0; j < kNk; ++j) {
      const SwizzledAOperand<false> ao0(ptx::SharedAddr(a0 + j * kSwizzledTile), WarpRow()),
          ao1(ptx::SharedAddr(a1 + j * kSwizzledTile), WarpRow());
#pragma unroll
      for (int l = 0; l < kBT; l += 16) {
        uint32_t fa0[4], fa1[4];
        ao0.Load(fa0, 0, l / 16);
        ao1.Load(fa1, 0, l / 16);
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          const tile::Bf16BOperand<true> bo(s + j * kBT * kLdSb + Col(t), kLdSb);
          uint32_t fb[4];
          bo.Load(fb, l);
          tile::MmaWarp16Step(acc0[t], fa0, fb);
          tile::MmaWarp16Step(acc1[t], fa1, fb);
        }
      }
    }
  }
};

// The block's K x kBV bf16 state copy (leading dimension LdSb; complete: behind a barrier) to
// the scratch's K x V state of the chunk (dst at the block's column of row 0), 16-byte pieces.
template <int kNk, int kBV>
__device__ inline void StoreStateCopy(bf16* dst, const bf16* copy, int v_dim) {
  constexpr int kPieces = kBV / 8;
  ForBlockItems<kThreads, kNk * kBT * kPieces>([&](int idx) {
    const int r = idx / kPieces, c8 = idx % kPieces * 8;
    *reinterpret_cast<uint4*>(dst + int64_t{r} * v_dim + c8) =
        *reinterpret_cast<const uint4*>(copy + r * LdSb<kBV>() + c8);
  });
}

// ----------------------------------------------------------------------------------------------
// A pass's copies: its sequence's chunk sources, and the tile sets they fill.

// kBV columns of the chunk's rows of a bf16 [B,T,H,D] tensor (chunk: its row 0 at the block's
// column), stored densely (kBV bf16 per row): 16-byte pieces, one or two per thread.
template <int kBV>
__device__ inline void IssueInV(bf16* dst, const bf16* chunk, int64_t token_stride, int rows) {
  constexpr int kPieces = kBV / 8;
  ForBlockItems<kThreads, kBT * kPieces>([&](int idx) {
    const int r = idx / kPieces, c8 = idx % kPieces * 8;
    const bool valid = r < rows;
    __pipeline_memcpy_async(dst + r * kBV + c8, chunk + (valid ? r * token_stride + c8 : 0), 16,
                            valid ? 0 : 16);
  });
}

// A pass's sequence: its chunks' sources at head h, as chunk 0's plus ci strides.
struct SeqSources {
  int len;         // tokens
  int64_t row0;    // flat token row of chunk 0's row 0
  int64_t tok0;    // element offset of chunk 0's row 0 in a [R,H,1] scratch tensor
  int64_t state0;  // of chunk 0's state (K x V)
  int64_t mat0;    // row of chunk 0's M in [chunks x H x 64, 64] (the M map's)
  int heads;

  __device__ SeqSources(const ChunkDeltaParams& p, const Seq& seq, int h)
      : len(seq.len),
        row0(MakeChunk(p, seq, 0).row),
        tok0(Tok(p, row0, h, 1)),
        state0(State(p, seq.first_chunk, h)),
        mat0(MatRow(p, seq.first_chunk, h)),
        heads(p.heads) {}
  // Chunk ci's first flat token row as the tile maps' 32-bit row coordinate (BuildTileMaps checks
  // that the rows fit).
  __device__ int RowAt(int ci) const { return static_cast<int>(row0 + ci * kBT); }
  __device__ int64_t MatRowAt(int ci) const { return mat0 + int64_t{ci} * heads * kBT; }
  __device__ int Rows(int ci) const { return min(kBT, len - ci * kBT); }
  // Offsets of chunk ci in a [R,H,dim] token tensor and in the states.
  __device__ int64_t TokAt(int ci, int dim) const {
    return (tok0 + int64_t{ci} * kBT * heads) * dim;
  }
  __device__ int64_t StateAt(int ci, int state_elements) const {
    return state0 + int64_t{ci} * heads * state_elements;
  }
};

// One chunk's tiles in shared memory: the forward reads the keys, W and G (and, where it writes
// o, the queries and M); the backward the keys, the queries, W, dO and G (and M where it forms
// M^T dO). The forward's are carved in that order from one byte offset; the backward's from three
// (the keys; the queries and W; M, dO and G), double-buffered apart (see StateBackwardKernel).
// The keys, the queries, W and M are swizzled tiles (chunk_delta_swizzled.cuh, TileGroup), each
// part that holds them 1024-byte aligned (AlignSwizzled).
struct ChunkTiles {
  bf16* k;    // nk swizzled tiles
  bf16* w;    // nk swizzled tiles
  bf16* q;    // nk swizzled tiles (backward; forward with o)
  bf16* M;    // a swizzled tile (forward with o; backward forming M^T dO)
  bf16* d_o;  // 64 x kBV (backward)
  float* G;   // 64

  static constexpr int kGBytes = kBT * sizeof(float);
  __host__ __device__ static constexpr int KeyBytes(int nk) { return nk * kSwizzledTileBytes; }
  __host__ __device__ static constexpr int ForwardBytes(int nk, bool output = false) {
    return AlignSwizzled((output ? 3 : 2) * KeyBytes(nk) + (output ? kSwizzledTileBytes : 0) +
                         kGBytes);
  }
  __host__ __device__ static constexpr int QueryBytes(int nk) { return 2 * KeyBytes(nk); }
  __host__ __device__ static constexpr int RestBytes(int bv, bool mtdo = false) {
    return AlignSwizzled((mtdo ? kSwizzledTileBytes : 0) + kBT * bv * 2 + kGBytes);
  }
  __device__ static ChunkTiles Forward(char* at, int nk, bool output) {
    ChunkTiles t{};
    t.k = reinterpret_cast<bf16*>(at);
    t.w = reinterpret_cast<bf16*>(at + KeyBytes(nk));
    if (output) {
      t.q = reinterpret_cast<bf16*>(at + 2 * KeyBytes(nk));
      t.M = reinterpret_cast<bf16*>(at + 3 * KeyBytes(nk));
    }
    t.G = reinterpret_cast<float*>(
        at + (output ? 3 * KeyBytes(nk) + kSwizzledTileBytes : 2 * KeyBytes(nk)));
    return t;
  }
  // The split forward with o (K > 128, see StateForwardKernel): a double-buffered set holds W and
  // G only; the keys, the queries and M have one buffer each (`singles`).
  __host__ __device__ static constexpr int SplitSetBytes(int nk) {
    return AlignSwizzled(KeyBytes(nk) + kGBytes);
  }
  __host__ __device__ static constexpr int SplitSingleBytes(int nk) {
    return 2 * KeyBytes(nk) + kSwizzledTileBytes;
  }
  __device__ static ChunkTiles SplitForward(char* set_at, char* singles, int nk) {
    ChunkTiles t{};
    t.w = reinterpret_cast<bf16*>(set_at);
    t.G = reinterpret_cast<float*>(set_at + KeyBytes(nk));
    t.k = reinterpret_cast<bf16*>(singles);
    t.q = reinterpret_cast<bf16*>(singles + KeyBytes(nk));
    t.M = reinterpret_cast<bf16*>(singles + 2 * KeyBytes(nk));
    return t;
  }
  __device__ static ChunkTiles Backward(char* keys, char* queries, char* rest, int nk, int bv,
                                        bool mtdo) {
    ChunkTiles t{};
    t.k = reinterpret_cast<bf16*>(keys);
    t.q = reinterpret_cast<bf16*>(queries);
    t.w = reinterpret_cast<bf16*>(queries + KeyBytes(nk));
    if (mtdo) t.M = reinterpret_cast<bf16*>(rest);
    t.d_o = reinterpret_cast<bf16*>(rest + (mtdo ? kSwizzledTileBytes : 0));
    t.G = reinterpret_cast<float*>(t.d_o + kBT * bv);
    return t;
  }
};

// The lane's key decay exp(G_L - G_r) from the chunk's G in shared memory.
__device__ __forceinline__ float KeyDecay(const ChunkTiles& t, float G_last, int r) {
  return __expf(G_last - t.G[r]);
}

// ----------------------------------------------------------------------------------------------
// Forward: per chunk, in order,
//   S[chunk] = S;  Ut = U - W S;  S = gamma_L S + K^T (diag(exp(G_L - G)) Ut).
// Two barriers per chunk: the swap of tile sets, and the decayed new values (bf16, the update's
// right-hand side). (A variant that double-buffered only W and G, the keys copied at the start of
// their own chunk, fitted three blocks per multiprocessor at K = 128 and ran (1, 8192, 96, 128)'s
// 384 blocks in one wave instead of two -- in 598 us instead of 590: the keys' copy, exposed once
// per chunk, cost what the wave saved.)
// Two blocks per multiprocessor where their shared memory allows (K <= 128 at 64 columns).
// kOutput: the pass also writes o = scale [diag(gamma) Q S + M Ut], OutputKernel's,
// from the bf16 S copy and the new values it has on chip: Q S beside W S (the same B fragments),
// M Ut after the second barrier from an undecayed bf16 copy of Ut. The queries and M travel with
// the chunk's tiles, so a block takes one multiprocessor; the launcher takes it where the grid
// runs in one wave either way (narrow batches), where OutputKernel's re-reading of Q, S and Ut
// cost 211 us per call at (2, 16384, 16, 128) beside the pass's 416.
// kOutput at K > 128 (kSplit): double-buffered tile sets of every operand do not fit beside the
// state copy, so only W and G are; the keys, the queries and M have one buffer each, refilled
// once the chunk before is done with them: the queries after the second barrier (their product
// Q S comes first), the keys and M after the next chunk's first barrier, landing while its W S
// and Q S run (their products come last; the second barrier waits for them). OutputKernel would
// read the state (bf16, K x V: 128 KB a chunk and head at K = V = 256) back from memory: at
// (8, 4096, 8, 256) on the H200 StateForward<4, 64> + OutputKernel took 477 + 313 us per call,
// this pass 678 (forward 1.12 -> 1.01 ms).
template <int kNk, int kBV, bool kOutput = false>
__global__ void __launch_bounds__(kThreads, !kOutput && (kBV == 32 || kNk <= 2) ? 2 : 1)
    StateForwardKernel(const __grid_constant__ StepBase b) {
  constexpr bool kSplit = kOutput && kNk > 2;
  constexpr int kT = ColumnTiles<kBV>(), kLdSb = LdSb<kBV>();
  extern __shared__ float4 smem4[];
  const ChunkDeltaParams& p = b.p;
  constexpr int K = kNk * kBT;
  const int V = p.v_dim;
  // The tile sets first, at the swizzle's alignment; then the state copy and the work tiles.
  char* sets_at;
  AlignedSharedBase(smem4, &sets_at);
  char* singles_at = sets_at + 2 * ChunkTiles::SplitSetBytes(kNk);  // kSplit
  bf16* s_copy = reinterpret_cast<bf16*>(
      kSplit ? singles_at + ChunkTiles::SplitSingleBytes(kNk)
             : sets_at + 2 * ChunkTiles::ForwardBytes(kNk, kOutput));  // S (bf16), K x kLdSb
  bf16* ut_tile = s_copy + K * kLdSb;    // decayed new values (bf16), 64 x kLdSb
  bf16* ut_raw = ut_tile + kBT * kLdSb;  // kOutput: the new values (bf16), 64 x kLdSb
  uint64_t* bars = reinterpret_cast<uint64_t*>(ut_raw + (kOutput ? kBT * kLdSb : 0));
  // Tile set i % 2 (computed, not an array indexed at run time: that would live in local memory).
  const auto set = [&](int i) {
    if constexpr (kSplit) {
      return ChunkTiles::SplitForward(sets_at + (i & 1) * ChunkTiles::SplitSetBytes(kNk),
                                      singles_at, kNk);
    } else {
      return ChunkTiles::Forward(sets_at + (i & 1) * ChunkTiles::ForwardBytes(kNk, kOutput), kNk,
                                 kOutput);
    }
  };
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int64_t ld_k = int64_t{p.heads} * K;  // between the rows of the keys, the queries and W
  const int64_t ld_v = int64_t{p.heads} * V;
  const int ra = LaneRow(), rb = ra + 8;
  // The copy groups' barriers: unsplit, one per tile set (all of a chunk's tiles one group);
  // kSplit, W's per set (0, 1), the keys' and M's (2), the queries' (3).
  const auto bar = [&](int i) { return CopyBarrier(bars + i, b.tile_copies); };
  if (threadIdx.x < 4) bar(threadIdx.x).Init();
  __syncthreads();
  const auto w_tiles = [&](const auto& group, int ci, const ChunkTiles& t) {
    group.Token(ptx::SharedAddr(t.w), &b.maps.w, 0, kNk, h, src.RowAt(ci), b.s.W + src.TokAt(ci, K),
                ld_k, src.Rows(ci));
  };
  const auto query_tiles = [&](const auto& group, int ci, const ChunkTiles& t) {
    group.Token(ptx::SharedAddr(t.q), &b.maps.qn, 0, kNk, h, src.RowAt(ci),
                b.s.qn + src.TokAt(ci, K), ld_k, src.Rows(ci));
  };
  const auto late_tiles = [&](const auto& group, int ci, const ChunkTiles& t) {  // keys, M
    group.Token(ptx::SharedAddr(t.k), &b.maps.kn, 0, kNk, h, src.RowAt(ci),
                b.s.kn + src.TokAt(ci, K), ld_k, src.Rows(ci));
    if constexpr (kOutput) {
      group.Block(ptx::SharedAddr(t.M), &b.maps.M, 0, src.MatRowAt(ci),
                  b.s.M + Mat(p, seq.first_chunk + ci, h), kBT);
    }
  };
  // G by cp.async, in the threads' commit groups (its rows are heads apart).
  const auto issue_g = [&](int ci, const ChunkTiles& t) {
    IssueRowScalars(t.G, nullptr, b.s.G + src.TokAt(ci, 1), nullptr, p.heads, src.Rows(ci));
  };
  // kSplit issues the parts at their own times: issue_w (W, G), issue_queries, issue_late (the
  // keys, M); otherwise issue takes all of a chunk's tiles at once.
  const auto issue_w = [&](int ci, const ChunkTiles& t) {
    w_tiles(TileGroup(bar(ci & 1), kNk), ci, t);
    issue_g(ci, t);
  };
  const auto issue_queries = [&](int ci, const ChunkTiles& t) {
    query_tiles(TileGroup(bar(3), kNk), ci, t);
  };
  const auto issue_late = [&](int ci, const ChunkTiles& t) {
    late_tiles(TileGroup(bar(2), kNk + (kOutput ? 1 : 0)), ci, t);
  };
  const auto issue = [&](int ci, const ChunkTiles& t) {
    if constexpr (kSplit) {
      issue_w(ci, t);
      issue_late(ci, t);
      issue_queries(ci, t);
    } else {
      const TileGroup group(bar(ci & 1), (kOutput ? 3 : 2) * kNk + (kOutput ? 1 : 0));
      w_tiles(group, ci, t);
      late_tiles(group, ci, t);
      if constexpr (kOutput) query_tiles(group, ci, t);
      issue_g(ci, t);
    }
  };
  // kOutput: chunk 0's o at the block's first column; each chunk moves it by o_step.
  bf16* o_chunk = kOutput ? p.o + In(p.v_strides, seq.batch, seq.bos, h) + v0 : nullptr;
  const int64_t o_step = int64_t{kBT} * p.v_strides.token;
  // U of a chunk goes straight to the lane's registers, one chunk ahead.
  const auto load_u = [&](int ci, RowPairs<bf16>(&u)[kT]) {
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      u[t].Load(b.s.U + src.TokAt(ci, V) + v0 + 32 * t, ld_v, src.Rows(ci));
    }
  };
  RowPairs<bf16> u_next[kT];
  if (seq.num_chunks > 0) {
    issue(0, set(0));
    load_u(0, u_next);
  }
  __pipeline_commit();
  StateTiles<kNk, kBV> S;
  S.LoadGlobal(p.initial_state ? p.initial_state + State(p, n, h) + v0 : nullptr, V);
  for (int ci = 0; ci < seq.num_chunks; ++ci) {
    const int rows = src.Rows(ci);
    const ChunkTiles t = set(ci);
    // Earlier readers of s_copy and ut_tile are behind the previous chunk's barriers.
    S.StoreBf16(s_copy);
    RowPairs<bf16> u[kT];
#pragma unroll
    for (int c = 0; c < kT; ++c) u[c] = u_next[c];
    bar(ci & 1).Wait(ci >> 1);
    if (kSplit) bar(3).Wait(ci);  // the queries
    // The garbage rows the copy engine brought (cp.async zero-fills them): W S's and the update's
    // (kSplit: the keys' below).
    if (b.tile_copies && rows < kBT) {
      ZeroRowsPast(t.w, kNk, rows);
      if (!kSplit) ZeroRowsPast(t.k, kNk, rows);
    }
    __pipeline_wait_prior(0);
    __syncthreads();  // this chunk's tiles and s_copy are in; the other set is free
    StoreStateCopy<kNk, kBV>(b.s.S + src.StateAt(ci, K * V) + v0, s_copy, V);
    if (kSplit) {
      if (ci > 0) issue_late(ci, t);  // chunk 0's came with its set
      __pipeline_commit();
    }
    if (ci + 1 < seq.num_chunks) {
      if (kSplit) {
        issue_w(ci + 1, set(ci + 1));
      } else {
        issue(ci + 1, set(ci + 1));
      }
      load_u(ci + 1, u_next);
    }
    __pipeline_commit();
    WarpAcc16 ut[kT];  // W S, then the new values
    WarpAcc16 o[kOutput ? kT : 1];  // kOutput: Q S, then o
#pragma unroll
    for (int c = 0; c < kT; ++c) ut[c].Zero();
    if constexpr (kOutput) {
#pragma unroll
      for (int c = 0; c < kT; ++c) o[c].Zero();
      StateTiles<kNk, kBV>::ProductBf16Pair(ut, o, t.w, t.q, s_copy);
    } else {
      StateTiles<kNk, kBV>::ProductBf16(ut, t.w, s_copy);
    }
    // The ungated rule's decays are 1 (G = 0): its multiplications by them are skipped.
    const float G_last = t.G[rows - 1];
    const float decay_a = KeyDecay(t, G_last, ra), decay_b = KeyDecay(t, G_last, rb);
#pragma unroll
    for (int c = 0; c < kT; ++c) {
#pragma unroll
      for (int e = 0; e < 8; ++e) ut[c].x[e] = u[c][e] - ut[c].x[e];
      StoreRows(b.s.Ut + src.TokAt(ci, V) + v0 + 32 * c, ld_v, ut[c], rows);
      if (kOutput) ut[c].StoreBf16(ut_raw + WarpRow() * kLdSb + WarpCol() + 32 * c, kLdSb);
      if (b.gated) ScaleRows(ut[c], decay_a, decay_b);
      ut[c].StoreBf16(ut_tile + WarpRow() * kLdSb + WarpCol() + 32 * c, kLdSb);
    }
    if (kSplit) {  // the keys and M (the next chunk's W may still fly)
      bar(2).Wait(ci);
      if (b.tile_copies && rows < kBT) ZeroRowsPast(t.k, kNk, rows);
      __pipeline_wait_prior(1);
    }
    __syncthreads();
    if (kSplit) {
      if (ci + 1 < seq.num_chunks) issue_queries(ci + 1, t);  // every Q S is done
      __pipeline_commit();
    }
    if (b.gated) S.Scale(expf(G_last));
    S.AddTransposedProductBf16(t.k, ut_tile);
    if constexpr (kOutput) {
      // o = scale [diag(gamma) Q S + M Ut] (M is zero past the chunk's end and above the
      // diagonal), after the state's update, which the next chunk waits for.
      const float gamma_a = __expf(t.G[ra]), gamma_b = __expf(t.G[rb]);
#pragma unroll
      for (int c = 0; c < kT; ++c) {
        if (b.gated) ScaleRows(o[c], gamma_a, gamma_b);
      }
      MmaSwizzledColumns<false>(o, t.M, WarpRow(), ut_raw + WarpCol(), kLdSb);
#pragma unroll
      for (int c = 0; c < kT; ++c) {
        o[c].Scale(p.scale);
        StoreRows(o_chunk + int64_t{ci} * o_step + 32 * c, p.v_strides.token, o[c], rows);
      }
    }
  }
  if (p.final_state) S.StoreGlobal(p.final_state + State(p, n, h) + v0, V);
}

inline size_t StateForwardSmem(int k_dim, int bv, bool output = false) {
  const int nk = k_dim / kBT;
  const size_t tiles = output && nk > 2
                           ? 2 * ChunkTiles::SplitSetBytes(nk) + ChunkTiles::SplitSingleBytes(nk)
                           : 2 * ChunkTiles::ForwardBytes(nk, output);
  return kSwizzleAlign + tiles + (k_dim + (output ? 2 : 1) * kBT) * (bv + 8) * sizeof(bf16) +
         kCopyBarrierBytes;
}

// ----------------------------------------------------------------------------------------------
// Backward: per chunk, in reverse, with dS the gradient of the state leaving the chunk:
//   dS[chunk] = dS;  dUt = diag(exp(G_L - G)) K dS + MtdO;
//   dS = gamma_L dS + Q^T (scale diag(gamma) dO) - W^T dUt,
// MtdO = scale M^T dO the chunk-local part (LocalValueGradsKernel, for all chunks at once; with
// kMtdO, below, the pass itself). Two barriers per chunk: the swap, -dUt. The products over K take
// bf16 copies of dS, of scale diag(gamma) dO and of -dUt.
//
// kSplit (two blocks per multiprocessor instead of one at K = 128 on the H200; the only variant
// that fits at K = 256): only the keys are double-buffered; the queries and W go into
// their one buffer at the start of their own chunk (they are needed last), dO and G into theirs
// once the chunk before is done with them (at its last barrier), a chunk's last step ahead of
// their first use. The launcher picks the variant that runs the pass in fewer waves of blocks
// (the double-buffered one on a tie).
// (With M^T dO in the pass -- an fp32 M tile and an fp32 dO tile per chunk, a third barrier --
// the pass ran one block per multiprocessor at K = 128: 1383 us at (1, 8192, 96, 128).)
// Two blocks per multiprocessor where their shared memory allows (K <= 128 at 32 columns, K = 64
// at 64).
// kMtdO (unsplit for K <= 128, split for K = 192 or 256): the pass forms MtdO = scale M^T dO
// itself, a bf16 product from M (bf16, with the chunk's dO and G) and the dO tile it copies
// anyway, no barrier of its own: LocalValueGradsKernel does not run. Unsplit it holds one block
// per multiprocessor, so the launcher takes it where the grid runs in one wave either way (narrow
// batches); split at K = 256, where the pass runs one block per multiprocessor anyway, M's 9 KB
// fit beside the rest (a K = 256 scratch MtdO costs 64 KB a chunk and head each way).
template <int kNk, bool kSplit, int kBV, bool kMtdO = false>
__global__ void __launch_bounds__(kThreads, !kMtdO && ((kBV == 32 && kNk <= 2) || kNk == 1) ? 2 : 1)
    StateBackwardKernel(const __grid_constant__ StepBase b) {
  static_assert(!kMtdO || (kSplit ? kNk >= 3 : kNk <= 2),
                "M^T dO in the unsplit pass for K <= 128, in the split one above");
  constexpr int kT = ColumnTiles<kBV>(), kLdSb = LdSb<kBV>();
  extern __shared__ float4 smem4[];
  const ChunkDeltaParams& p = b.p;
  constexpr int K = kNk * kBT;
  const int V = p.v_dim;
  // The tile sets first, at the swizzle's alignment; then the gradient's copy and the work tiles.
  constexpr int key_bytes = ChunkTiles::KeyBytes(kNk), query_bytes = ChunkTiles::QueryBytes(kNk);
  constexpr int rest_bytes = ChunkTiles::RestBytes(kBV, kMtdO);
  char* keys_at;
  AlignedSharedBase(smem4, &keys_at);
  char* queries_at = keys_at + 2 * key_bytes;
  char* rest_at = queries_at + (kSplit ? 1 : 2) * query_bytes;
  bf16* ds_copy = reinterpret_cast<bf16*>(rest_at + (kSplit ? 1 : 2) * rest_bytes);  // K x kLdSb
  bf16* d_og = ds_copy + K * kLdSb;  // scale diag(gamma) dO (bf16), 64 x kLdSb
  bf16* dut = d_og + kBT * kLdSb;    // -dUt (bf16), 64 x kLdSb
  uint64_t* bars = reinterpret_cast<uint64_t*>(dut + kBT * kLdSb);
  const auto set = [&](int i) {  // as in the forward
    const int buffer = kSplit ? 0 : i & 1;
    return ChunkTiles::Backward(keys_at + (i & 1) * key_bytes, queries_at + buffer * query_bytes,
                                rest_at + buffer * rest_bytes, kNk, kBV, kMtdO);
  };
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int64_t ld_k = int64_t{p.heads} * K;  // between the rows of the keys, the queries and W
  const bf16* d_o0 = p.d_o + In(p.v_strides, seq.batch, seq.bos, h) + v0;  // chunk 0's row 0
  const int64_t ld_v = int64_t{p.heads} * V;
  const int ra = LaneRow(), rb = ra + 8;
  // The copy groups' barriers: unsplit, one per tile set (all of a chunk's tiles one group);
  // kSplit, the keys' per set (0, 1), the queries' and W's (2), M's with dO and G (3).
  const auto bar = [&](int i) { return CopyBarrier(bars + i, b.tile_copies); };
  if (threadIdx.x < 4) bar(threadIdx.x).Init();
  __syncthreads();
  const auto key_tiles = [&](const auto& group, int ci, const ChunkTiles& t) {
    group.Token(ptx::SharedAddr(t.k), &b.maps.kn, 0, kNk, h, src.RowAt(ci),
                b.s.kn + src.TokAt(ci, K), ld_k, src.Rows(ci));
  };
  const auto query_tiles = [&](const auto& group, int ci, const ChunkTiles& t) {  // and W
    group.Token(ptx::SharedAddr(t.q), &b.maps.qn, 0, kNk, h, src.RowAt(ci),
                b.s.qn + src.TokAt(ci, K), ld_k, src.Rows(ci));
    group.Token(ptx::SharedAddr(t.w), &b.maps.w, 0, kNk, h, src.RowAt(ci), b.s.W + src.TokAt(ci, K),
                ld_k, src.Rows(ci));
  };
  // M's tile, and dO and G by cp.async (dO's block columns, G's rows heads apart).
  const auto rest = [&](const auto& group, int ci, const ChunkTiles& t) {
    const int rows = src.Rows(ci);
    if constexpr (kMtdO) {
      group.Block(ptx::SharedAddr(t.M), &b.maps.M, 0, src.MatRowAt(ci),
                  b.s.M + Mat(p, seq.first_chunk + ci, h), kBT);
    }
    IssueInV<kBV>(t.d_o, d_o0 + int64_t{ci} * kBT * p.v_strides.token, p.v_strides.token, rows);
    IssueRowScalars(t.G, nullptr, b.s.G + src.TokAt(ci, 1), nullptr, p.heads, rows);
  };
  // Set i's parts for chunk ci: kSplit issues them at their own times, otherwise issue_all.
  const auto issue_keys = [&](int ci, int i) { key_tiles(TileGroup(bar(i & 1), kNk), ci, set(i)); };
  const auto issue_queries = [&](int ci, int i) {
    query_tiles(TileGroup(bar(2), 2 * kNk), ci, set(i));
  };
  const auto issue_rest = [&](int ci, int i) {
    rest(TileGroup(bar(3), kMtdO ? 1 : 0), ci, set(i));
  };
  const auto issue_all = [&](int ci, int i) {
    const TileGroup group(bar(i & 1), 3 * kNk + (kMtdO ? 1 : 0));
    const ChunkTiles t = set(i);
    key_tiles(group, ci, t);
    query_tiles(group, ci, t);
    rest(group, ci, t);
  };
  // MtdO of a chunk goes straight to the lane's registers, one chunk ahead (but with kMtdO).
  const auto load_local = [&](int ci, RowPairs<float>(&m)[kT]) {
    if constexpr (!kMtdO) {
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        m[t].Load(b.s.MtdO + src.TokAt(ci, V) + v0 + 32 * t, ld_v, src.Rows(ci));
      }
    }
  };
  RowPairs<float> local_next[kT];
  const int last = seq.num_chunks - 1;
  if (last >= 0) {
    if (kSplit) {
      issue_keys(last, 0);
      issue_rest(last, 0);
    } else {
      issue_all(last, 0);
    }
    load_local(last, local_next);
  }
  __pipeline_commit();
  StateTiles<kNk, kBV> dS;
  dS.LoadGlobal(p.d_final_state ? p.d_final_state + State(p, n, h) + v0 : nullptr, V);
  for (int it = 0; it <= last; ++it) {
    const int ci = last - it, rows = src.Rows(ci);
    const ChunkTiles t = set(it);
    // Earlier readers of ds_copy and the work tiles are behind the previous chunk's barriers.
    dS.StoreBf16(ds_copy);
    RowPairs<float> local[kT];  // but with kMtdO
    if constexpr (!kMtdO) {
#pragma unroll
      for (int c = 0; c < kT; ++c) local[c] = local_next[c];
    }
    bar(it & 1).Wait(it >> 1);
    if (kSplit) bar(3).Wait(it);  // M
    // The garbage rows the copy engine brought (cp.async zero-fills them): K dS's and the
    // update's (kSplit: the queries' and W's below).
    if (b.tile_copies && rows < kBT) {
      ZeroRowsPast(t.k, kNk, rows);
      if (!kSplit) ZeroRowsPast(t.q, 2 * kNk, rows);  // the queries and W
    }
    __pipeline_wait_prior(0);
    __syncthreads();  // this chunk's tiles (but split-mode q and W) are in; the other set is free
    StoreStateCopy<kNk, kBV>(b.s.dS + src.StateAt(ci, K * V) + v0, ds_copy, V);
    if (ci > 0) {
      if (kSplit) {
        issue_keys(ci - 1, it + 1);
      } else {
        issue_all(ci - 1, it + 1);
      }
      load_local(ci - 1, local_next);
    }
    __pipeline_commit();
    if (kSplit) {
      issue_queries(ci, it);
      __pipeline_commit();
    }
    WarpAcc16 du[kT];  // K dS, then dUt
#pragma unroll
    for (int c = 0; c < kT; ++c) du[c].Zero();
    StateTiles<kNk, kBV>::ProductBf16(du, t.k, ds_copy);
    WarpAcc16 mtdo[kMtdO ? kT : 1];  // kMtdO: M^T dO (after K dS, which the chain waits for)
    if constexpr (kMtdO) {
#pragma unroll
      for (int c = 0; c < kT; ++c) mtdo[c].Zero();
      MmaSwizzledColumns<true>(mtdo, t.M, WarpRow(), t.d_o + WarpCol(), kBV);
    }
    // scale diag(gamma) dO in bf16, eight columns (16 bytes) a thread at a time (element by
    // element, a 2-byte shared load and store and an exp each, the pass took 887 us instead of
    // 843 at (1, 8192, 96, 128)).
    ForBlockItems<kThreads, kBT * kBV / 8>([&](int idx) {
      const int r = idx / (kBV / 8), c8 = idx % (kBV / 8) * 8;
      const float f = b.gated ? p.scale * __expf(t.G[r]) : p.scale;
      float x[8];
      LoadBf16x8(t.d_o + r * kBV + c8, x);
#pragma unroll
      for (int u = 0; u < 8; ++u) x[u] *= f;
      StoreBf16x8(d_og + r * kLdSb + c8, x);
    });
    // The ungated rule's decays are 1 (G = 0): its multiplications by them are skipped.
    const float G_last = t.G[rows - 1];
    const float decay_a = KeyDecay(t, G_last, ra), decay_b = KeyDecay(t, G_last, rb);
#pragma unroll
    for (int c = 0; c < kT; ++c) {
      if (b.gated) ScaleRows(du[c], decay_a, decay_b);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if constexpr (kMtdO) {
          du[c].x[e] += p.scale * mtdo[c].x[e];
        } else {
          du[c].x[e] += local[c][e];
        }
      }
      StoreRows(b.s.dUt + src.TokAt(ci, V) + v0 + 32 * c, ld_v, du[c], rows);
      du[c].Scale(-1.0f);
      du[c].StoreBf16(dut + WarpRow() * kLdSb + WarpCol() + 32 * c, kLdSb);
    }
    if (kSplit) {  // the queries and W
      bar(2).Wait(it);
      if (b.tile_copies && rows < kBT) ZeroRowsPast(t.q, 2 * kNk, rows);
      __pipeline_wait_prior(0);
    }
    __syncthreads();
    if (kSplit) {
      if (ci > 0) issue_rest(ci - 1, it + 1);
      __pipeline_commit();
    }
    if (b.gated) dS.Scale(expf(G_last));
    dS.AddTransposedProductBf16(t.q, d_og);
    dS.AddTransposedProductBf16(t.w, dut);
  }
  if (p.d_initial_state) dS.StoreGlobal(p.d_initial_state + State(p, n, h) + v0, V);
}

inline size_t StateBackwardSmem(int k_dim, bool split, int bv, bool mtdo = false) {
  const int nk = k_dim / kBT;
  return kSwizzleAlign + 2 * ChunkTiles::KeyBytes(nk) +
         (split ? 1 : 2) * (ChunkTiles::QueryBytes(nk) + ChunkTiles::RestBytes(bv, mtdo)) +
         (k_dim + 2 * kBT) * (bv + 8) * sizeof(bf16) + kCopyBarrierBytes;
}

// The passes' instantiations for K = 64 nk (nk = 1..4) and kBV = bv (32 or 64).
template <int kBV>
inline void (*StateForwardFor(int nk))(StepBase) {
  switch (nk) {
    case 1:
      return StateForwardKernel<1, kBV>;
    case 2:
      return StateForwardKernel<2, kBV>;
    case 3:
      return StateForwardKernel<3, kBV>;
    default:
      return StateForwardKernel<4, kBV>;
  }
}

// With o in the pass (output; split above K = 128).
inline void (*StateForwardFor(int nk, int bv, bool output = false))(StepBase) {
  if (output) {
    constexpr auto kOut = true;
    switch (nk) {
      case 1:
        return bv == 64 ? StateForwardKernel<1, 64, kOut> : StateForwardKernel<1, 32, kOut>;
      case 2:
        return bv == 64 ? StateForwardKernel<2, 64, kOut> : StateForwardKernel<2, 32, kOut>;
      case 3:
        return bv == 64 ? StateForwardKernel<3, 64, kOut> : StateForwardKernel<3, 32, kOut>;
      default:
        return bv == 64 ? StateForwardKernel<4, 64, kOut> : StateForwardKernel<4, 32, kOut>;
    }
  }
  return bv == 64 ? StateForwardFor<64>(nk) : StateForwardFor<32>(nk);
}

template <bool kSplit, int kBV>
inline void (*StateBackwardFor(int nk))(StepBase) {
  switch (nk) {
    case 1:
      return StateBackwardKernel<1, kSplit, kBV>;
    case 2:
      return StateBackwardKernel<2, kSplit, kBV>;
    case 3:
      return StateBackwardKernel<3, kSplit, kBV>;
    default:
      return StateBackwardKernel<4, kSplit, kBV>;
  }
}

// With M^T dO in the pass (mtdo): unsplit for K <= 128, split above (where only the split pass
// fits); null otherwise.
inline void (*StateBackwardFor(int nk, bool split, int bv, bool mtdo = false))(StepBase) {
  if (mtdo && split) {
    if (nk < 3) return nullptr;
    return bv == 64 ? (nk == 3 ? StateBackwardKernel<3, true, 64, true>
                               : StateBackwardKernel<4, true, 64, true>)
                    : (nk == 3 ? StateBackwardKernel<3, true, 32, true>
                               : StateBackwardKernel<4, true, 32, true>);
  }
  if (mtdo) {
    if (nk > 2) return nullptr;
    return bv == 64 ? (nk == 1 ? StateBackwardKernel<1, false, 64, true>
                               : StateBackwardKernel<2, false, 64, true>)
                    : (nk == 1 ? StateBackwardKernel<1, false, 32, true>
                               : StateBackwardKernel<2, false, 32, true>);
  }
  if (bv == 64) return split ? StateBackwardFor<true, 64>(nk) : StateBackwardFor<false, 64>(nk);
  return split ? StateBackwardFor<true, 32>(nk) : StateBackwardFor<false, 32>(nk);
}

}  // namespace flame::kernels::delta_chunk::tiles
