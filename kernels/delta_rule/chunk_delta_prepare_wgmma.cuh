// ChunkPrepareKernel's per-chunk preparation (chunk_delta_prepare.cuh, formulas in
// chunk_delta_steps.h) on warpgroup products (sm_90a). ChunkPrepareKernel's eight warps load every
// product's fragments with ldmatrix and run its m16n8k16 steps themselves: ~3160 instructions a
// warp and chunk at ~0.6 issued a cycle and scheduler, barrier waits first (ncu; 593 us, 2.2
// TB/s, at (1, 8192, 96, 128)). Here the products are 64 x 64 wgmma products with both operands in
// shared memory, the two warpgroups side by side:
//   warpgroup 0:  QK = Q K^T  -> M  (where a kernel reads M: the ungated rule's column passes
//                                    form it themselves, and then warpgroup 0 repeats KK)
//   warpgroup 1:  KK = K K^T  -> KD^T, A
// then W = T diag(beta gamma) K and U = T diag(beta) V (T diag(f) as hi + lo tiles), their 64-wide
// slices W's first and U's after as one list, two items at a time (item 2 n + group in step n).
// The keys and queries come by the copy engine; the results leave through swizzled tiles the
// products are done with (GroupAcc::StoreRowsVia); T's last touch (FinishT) is made in the pass
// that scales and splits it. The inverse (I + A)^-1 is InvertUnitLower's, as in
// ChunkPrepareKernel, so T, W and U are the same up to the order of the sums. Both warpgroups run
// the same product instructions with other descriptors: a product under a branch on the warpgroup
// is serialised (ptxas C7520). On the H200 (ncu, per call, ungated / gated): 283 / 294 us at (2,
// 16384, 16, 128) (396 before); one step before (T's finish a pass of its own) 437 / 458 at (1,
// 8192, 96, 128), ~2160 instructions a warp, 41% of them the inverse's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_grid.cuh"
#include "kernels/common/mma_tile.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_copies.cuh"
#include "kernels/delta_rule/chunk_delta_swizzled.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Shared memory (from a 1024-byte aligned base): A (fp32, leading dimension kLd), then T diag(beta
// gamma) as swizzled hi and lo tiles; T (fp32), then T diag(beta) as hi and lo; the key tiles; the
// query tiles, where the value tiles land once QK is formed; G and beta; the copy barrier.
struct ChunkPrepareWgmmaLayout {
  static constexpr int kY = 0;
  static constexpr int kT = kY + kTile * 4;  // 17 KB: a multiple of 1024
  static constexpr int kKeys = kT + kTile * 4;
  static_assert(kTile * 4 % 1024 == 0 && 2 * kSwizzledTileBytes <= kTile * 4,
                "an fp32 tile's space holds two swizzled tiles at the swizzle's period");
  int nk, nq;  // key tiles; query or value tiles
  __host__ __device__ ChunkPrepareWgmmaLayout(int k_dim, int v_dim)
      : nk(k_dim / kBT), nq(nk > v_dim / kBT ? nk : v_dim / kBT) {}
  __host__ __device__ int Rows() const { return kKeys + nk * kSwizzledTileBytes; }
  __host__ __device__ int Scalars() const { return Rows() + nq * kSwizzledTileBytes; }
  __host__ __device__ int Bar() const { return Scalars() + 2 * kBT * 4; }  // the keys' and queries'
  __host__ __device__ int Bytes() const { return Bar() + 8; }
};
// With room to align the tiles to 1024 bytes (the swizzle's period, taken from the address).
inline size_t ChunkPrepareWgmmaSmem(int k_dim, int v_dim) {
  return ChunkPrepareWgmmaLayout(k_dim, v_dim).Bytes() + 1024;
}

// kGated: b.gated (ungated, G = 0 and the decays are 1; as a runtime branch, each element's
// decay was a branch of its own).
template <bool kGated>
__global__ void __launch_bounds__(kThreads, 3)
    ChunkPrepareWgmmaKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  extern __shared__ float4 smem4[];
  char* at;
  const uint32_t at_s = AlignedSharedBase(smem4, &at);
  const ChunkDeltaParams& p = b.p;
  const ChunkPrepareWgmmaLayout layout(p.k_dim, p.v_dim);  // (its constants too)
  float* y = reinterpret_cast<float*>(at + layout.kY);
  float* T = reinterpret_cast<float*>(at + layout.kT);
  float* G = reinterpret_cast<float*>(at + layout.Scalars());
  float* beta = G + kBT;
  const uint32_t keys = at_s + layout.kKeys, rows = at_s + layout.Rows();
  const int chunk = BlockChunk(p.heads), h = BlockHead(p.heads);  // (ChunkHeadsGrid)
  const int nk = layout.nk, nv = p.v_dim / kBT;
  const int group = threadIdx.x / 128;
  const Chunk c = LocateChunk(p, chunk);
  // M, unless only the column passes would read it, which form it themselves (the gated rule's
  // RowTerms reads it too).
  const bool form_m = kGated || !b.column_passes;
  const int64_t qk_stride = int64_t{p.heads} * p.k_dim;
  // The keys and queries by the copy engine (TileGroup; this kernel runs only where
  // b.tile_copies holds), the rows past the chunk's end, which it reads from the next chunk,
  // zeroed once landed; G and beta by cp.async.
  const CopyBarrier bar(reinterpret_cast<uint64_t*>(at + layout.Bar()), true);
  if (threadIdx.x == 0) bar.Init();
  __syncthreads();
  {
    const TileGroup tiles(bar, form_m ? 2 * nk : nk);
    const int row = static_cast<int>(c.row);
    if (form_m) {
      tiles.Token(rows, &b.maps.qn, 0, nk, h, row, b.s.qn + Tok(p, c.row, h, p.k_dim), qk_stride,
                  c.rows);
    }
    tiles.Token(keys, &b.maps.kn, 0, nk, h, row, b.s.kn + Tok(p, c.row, h, p.k_dim), qk_stride,
                c.rows);
  }
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  bar.Wait(0);
  // (The keys, then the queries: adjacent.)
  if (c.rows < kBT) {
    ZeroRowsPast(reinterpret_cast<bf16*>(at + layout.kKeys), form_m ? 2 * nk : nk, c.rows);
  }
  wgmma::FenceSharedForProducts();
  __syncthreads();
  {
    // Warpgroup 0: QK (A: the query tiles), 1: KK (A: the key tiles); B: the key tiles, K-major.
    const uint32_t a_tiles = group == 0 && form_m ? rows : keys;
    GroupAcc64 acc;
    acc.Zero();
    wgmma::Fence();
    const uint64_t a = wgmma::DescriptorSwizzle128(a_tiles);
    const uint64_t bk = wgmma::DescriptorSwizzle128(keys);
    // Unrolled with a guard (a loop over nk made ptxas serialise the products, C7515). A k step
    // of 16 is 32 bytes on within a tile.
#pragma unroll
    for (int j = 0; j < kMaxKSlices; ++j) {
      if (j >= nk) break;
      const uint64_t tile = j * (kSwizzledTileBytes / 16);
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        wgmma::MmaSharedA64<false>(acc.d, a + tile + 2 * s, bk + tile + 2 * s);
      }
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    DecayLowerTriangle<kGated>(acc, G, c.rows);
    if (group == 0) {
      // M = tril(QK * D) in bf16 (the output's and LocalValueGrads' bf16 products read it), all
      // 64 rows, through the first query tile, which only this warpgroup's products read. (Where
      // no kernel reads M, the warpgroup has multiplied KK too, and drops it.)
      if (form_m) acc.StoreRowsVia(rows, at + layout.Rows(), b.s.M + Mat(p, chunk, h), kBT, kBT);
    } else {
      // KD = strict_tril(KK * D); A = diag(beta) KD into y; KD^T above TKD's diagonal, where the
      // caller keeps it (or the backward recomputes) for WYBackward.
      float* tkd = b.s.TKD != nullptr ? b.s.TKD + Mat(p, chunk, h) : nullptr;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = GroupAcc64::Row(half);
        const float beta_r = beta[r];
#pragma unroll
        for (int j = 0; j < GroupAcc64::kTiles; ++j) {
          const int col = GroupAcc64::Col(j);
          const float* x = acc.d + 4 * j + 2 * half;
          const float kd0 = col < r ? x[0] : 0.0f, kd1 = col + 1 < r ? x[1] : 0.0f;
          *reinterpret_cast<float2*>(y + r * kLd + col) = make_float2(beta_r * kd0, beta_r * kd1);
        }
      }
      if (tkd != nullptr) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = GroupAcc64::Row(half);
#pragma unroll
          for (int j = 0; j < GroupAcc64::kTiles; ++j) {
            const int col = GroupAcc64::Col(j);
            if (col < r) tkd[col * kBT + r] = acc.d[4 * j + 2 * half];
            if (col + 1 < r) tkd[(col + 1) * kBT + r] = acc.d[4 * j + 2 * half + 1];
          }
        }
      }
    }
  }
  __syncthreads();  // A is in y; no warpgroup reads the query tiles any more
  {
    const bf16* v = p.v + In(p.v_strides, c.batch, c.t0, h);
    for (int j = 0; j < nv; ++j) {
      IssueSwizzledTile(rows + j * kSwizzledTileBytes, v + j * kBT, p.v_strides.token, c.rows);
    }
    __pipeline_commit();
  }
  InvertUnitLower<false>(T, y);  // FinishT below, as each thread reads its part of T
  // T diag(f) as swizzled hi + lo bf16 tiles, the A operands of W's products (f = beta gamma,
  // into y's space) and U's (f = beta, into T's once every thread has read its part of T), and T
  // on and below the diagonal as TKD's lower part for WYBackward. Each thread takes columns m,
  // m + 1 of rows warp + 8 i: one 16-byte piece (m / 8) ^ warp of the swizzled rows.
  {
    const int warp = threadIdx.x / 32, m = threadIdx.x % 32 * 2;
    const int put = ((m / 8 ^ warp) << 4) + m % 8 * 2;
    float* tkd = b.s.TKD != nullptr ? b.s.TKD + Mat(p, chunk, h) : nullptr;
    const float beta0 = beta[m], beta1 = beta[m + 1];
    const float gamma0 = kGated ? __expf(G[m]) : 1.0f, gamma1 = kGated ? __expf(G[m + 1]) : 1.0f;
    float2 t[kBT / kWarps];
#pragma unroll
    for (int i = 0; i < kBT / kWarps; ++i) {
      const int r = warp + kWarps * i;
      const float2 x = *reinterpret_cast<const float2*>(T + r * kLd + m);
      t[i] = make_float2(FinishT(r, m, x.x), FinishT(r, m + 1, x.y));
      bf16* hi = reinterpret_cast<bf16*>(at + layout.kY + r * 128 + put);
      tile::StoreSplitBf16Pair(hi, hi + kSwizzledTile, t[i].x * beta0 * gamma0,
                               t[i].y * beta1 * gamma1);
      if (tkd != nullptr && m <= r) {  // (KD^T, above the diagonal, is the key warpgroup's)
        if (m < r) {
          *reinterpret_cast<float2*>(tkd + r * kBT + m) = t[i];
        } else {
          tkd[r * kBT + m] = t[i].x;
        }
      }
    }
    __syncthreads();  // T is read
#pragma unroll
    for (int i = 0; i < kBT / kWarps; ++i) {
      bf16* hi = reinterpret_cast<bf16*>(at + layout.kT + (warp + kWarps * i) * 128 + put);
      tile::StoreSplitBf16Pair(hi, hi + kSwizzledTile, t[i].x * beta0, t[i].y * beta1);
    }
  }
  __pipeline_wait_prior(0);  // V
  wgmma::FenceSharedForProducts();
  __syncthreads();
  // W's slices then U's as one list, item 2 n + group in step n; where the count is odd, the last
  // step's warpgroup 1 repeats the last item without storing it (the same instructions in both).
  const int items = nk + nv;
  for (int n = 0; 2 * n < items; ++n) {
    const int item = 2 * n + group < items ? 2 * n + group : items - 1;
    const bool w = item < nk;
    const int slice = w ? item : item - nk;
    const uint64_t a = wgmma::DescriptorSwizzle128(at_s + (w ? layout.kY : layout.kT));
    const uint64_t bx = wgmma::DescriptorSwizzle128((w ? keys : rows) + slice * kSwizzledTileBytes);
    GroupAcc64 acc;
    acc.Zero();
    wgmma::Fence();
    // T diag(f) is lower triangular, but a product step spans all 64 rows: no step is skipped.
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      // A: k step s of 16 is 32 bytes on (K-major); B (N-major): 16 rows, 2048 bytes on.
      wgmma::MmaSharedA64<true>(acc.d, a + 2 * s, bx + 128 * s);
      wgmma::MmaSharedA64<true>(acc.d, a + kSwizzledTileBytes / 16 + 2 * s, bx + 128 * s);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    // The item's B tile, which no other product reads (but the repeat's, whose result is
    // dropped), carries the result out.
    if (2 * n + group >= items) continue;
    const uint32_t stage = (w ? keys : rows) + slice * kSwizzledTileBytes;
    const char* stage_at = at + (stage - at_s);
    if (w) {
      acc.StoreRowsVia(stage, stage_at, b.s.W + Tok(p, c.row, h, p.k_dim) + slice * kBT, qk_stride,
                       c.rows);
    } else {
      acc.StoreRowsVia(stage, stage_at, b.s.U + Tok(p, c.row, h, p.v_dim) + slice * kBT,
                       int64_t{p.heads} * p.v_dim, c.rows);
    }
  }
#endif
}

}  // namespace flame::kernels::delta_chunk::tiles
