// The backward's row terms of the chunked delta rule (RowTermsKernel's formulas and grid, see
// chunk_delta_row_terms.cuh) on warpgroup products (sm_90a). RowTermsKernel's eight warps each
// load their A and B fragments of every product with ldmatrix (per V step a block reads ~147 KB of
// shared memory for its 40 KB of tiles) and wait on those loads. Here each warpgroup runs two of
// the four products of a V step as 64 x 64 wgmma products, the A fragments read once per warp (its
// 16 rows), B read by the tensor cores once per warpgroup:
//   warpgroup 0:  S dO += dO S^T,   dM += dO Ut^T      (A = dO for both; B = S, Ut)
//   warpgroup 1:  dKd  += Ut dS'^T, dY S^T             (B = dS', S; dX = -dY S^T)
// and the epilogue splits the same way: warpgroup 0 forms dMD (two bf16 tiles, hi + lo, over the
// first step buffer), P's sums and the query dots, warpgroup 1 the key dots and k . dX (with dMD,
// P and the key dots in one warpgroup and only the query dots in the other, ncu's first stall was
// the barrier after the epilogue; this split took the kernel from 304.3 to 301.9 us at (8, 2048,
// 16, 128)); after a barrier, warpgroup 0 finishes dq = scale diag(gamma) S dO + dMD K and
// warpgroup 1 dk = diag(exp(G_L - G)) dKd - diag(beta gamma) dY S^T + dMD^T Q + (dAb + dAb^T) K,
// the products with dMD as eight 64 x 64 x 16 products (B: the key or query tile, N-major) and
// the one with WYBackward's dAb + dAb^T as dAb_p K + dAb_p^T K (dAb_p its packed tile, copied in
// during the last V step; Scratch::dAb) in eight more with A, too, from shared memory (for
// dAb_p^T read transposed), which both warpgroups issue (warpgroup 0's result is not used: the
// same instructions in both, see below). A warpgroup accumulator holds whole rows per warp
// (GroupAcc64), so the rows' dG parts need only a quad's shuffles. The V steps' tiles are
// double-buffered (two blocks per multiprocessor).
// The tiles are in the 128-byte swizzle layout (chunk_delta_swizzled.cuh), which the copy engine
// fills (TileGroup: 908 -> 852 us at (1, 8192, 96, 128) against cp.async's whole 128-byte rows per
// warp, which dO, with the caller's strides, still takes).
// Measured on the H200 at (8, 2048, 16, 128), per call: RowTermsKernel 353 us, this kernel 306;
// with the tiles in the no-swizzle core-matrix layout instead (each warp copying 64
// bytes of 8 rows) it took 492; persistent (each block looping over items, the next item's first
// V step copied during this item's epilogue, which within 128 registers took its products'
// fragments in two waits) 406.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_grid.cuh"
#include "kernels/common/mma_tile.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_copies.cuh"
#include "kernels/delta_rule/chunk_delta_swizzled.cuh"

namespace flame::kernels::delta_chunk::tiles {

// This thread's part of the dot product of two 64 x 64 bf16 tiles of the same layout: 16 element
// pairs, two 16-byte pieces of each.
__device__ __forceinline__ float TileDotPart16B(uint32_t a, uint32_t b) {
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t at = (threadIdx.x + kThreads * i) * 16;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t x = ptx::LoadShared(a + at + 4 * w), y = ptx::LoadShared(b + at + 4 * w);
      sum += __uint_as_float(x << 16) * __uint_as_float(y << 16) +
             __uint_as_float(x & 0xffff0000u) * __uint_as_float(y & 0xffff0000u);
    }
  }
  return sum;
}

// Shared memory: two V-step buffers of five swizzled tiles (S, dS', dO, dY, Ut; after the loop
// the first buffer's S and dS' slots hold dMD's hi and lo tiles, and the dY slot of the buffer
// that the last step leaves free holds dAb's packed tile), the slice's q and k tiles and the
// first slice's M (swizzled); G, gamma, exp(G_L - G) and beta; the warpgroups' row parts of dG
// [2][64] and warpgroup 1's gamma_i k_i . dX_i [64], the P column sums of warpgroup 0's warps
// [4][64], the warps' parts of <S, dS'> [8] and of the decayed key sum [4].
struct RowTermsWgmmaLayout {
  enum StepTile { kS, kDS, kDO, kDY, kUt, kStepTiles };
  static constexpr int kStep = kStepTiles * kSwizzledTileBytes;
  static constexpr int kQ = 2 * kStep;
  static constexpr int kK = kQ + kSwizzledTileBytes;
  static constexpr int kM = kK + kSwizzledTileBytes;
  static constexpr int kG = kM + kSwizzledTileBytes;
  static constexpr int kRowParts = kG + 4 * kBT * 4;
  static constexpr int kKx = kRowParts + 2 * kBT * 4;
  static constexpr int kColParts = kKx + kBT * 4;
  static constexpr int kWarpSums = kColParts + 4 * kBT * 4;
  static constexpr int kBars = kWarpSums + 12 * 4;  // the copy barriers (8-byte aligned)
  static constexpr int kBytes = kBars + kCopyBarrierBytes;
};
// With room to align the tiles to 1024 bytes (the swizzle's period, taken from the address).
inline size_t RowTermsWgmmaSmem() { return RowTermsWgmmaLayout::kBytes + 1024; }

// kGated: b.gated. Ungated (the delta rule, G = 0) the kernel forms no part of dG: no <S, dS'>,
// no key or query dots, no P sums (nor M, which only they read), and dMD without decays. (As a
// runtime branch, the two epilogues spilled.) On the H200, per call at (1, 8192, 96, 128) (ncu):
// 868 us for the gated rule, 666 without the dG parts (332 M against 235 M warp instructions; of
// the difference, the epilogue's dG terms 66 M, <S, dS'> 26 M), 3.81 TB/s with L2 88% busy.
template <bool kGated>
__global__ void __launch_bounds__(kThreads, 2)
    RowTermsWgmmaKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  using L = RowTermsWgmmaLayout;
  extern __shared__ float4 smem4[];
  char* at;
  const uint32_t at_s = AlignedSharedBase(smem4, &at);
  float* G = reinterpret_cast<float*>(at + L::kG);
  float* gamma = G + kBT;
  float* decay = gamma + kBT;  // exp(G_L - G)
  float* beta = decay + kBT;
  float* kx_rows = reinterpret_cast<float*>(at + L::kKx);          // gamma_i k_i . dX_i
  float* row_parts = reinterpret_cast<float*>(at + L::kRowParts);  // [warpgroup][row]
  float* col_parts = reinterpret_cast<float*>(at + L::kColParts);  // [warp of group 0][column]
  float* warp_sums = reinterpret_cast<float*>(at + L::kWarpSums);  // <S, dS'> [8], keys [4]
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT;
  // Slices fastest, then heads, then chunks.
  const int slice = BlockSlice(nk), k0 = slice * kBT, h = BlockHead(p.heads, nk);
  const int chunk = BlockChunk(p.heads, nk);
  const bool first_slice = slice == 0;
  const bool with_m = kGated && first_slice;  // M: only for dG's P sums
  const Chunk c = LocateChunk(p, chunk);
  const int warp = threadIdx.x / 32, group = warp / 4;
  const int64_t qk_stride = int64_t{p.heads} * K, tok_stride = int64_t{p.heads} * V;

  // The tiles by the copy engine on sm_90 (chunk_delta_swizzled.cuh, TileGroup), on the V steps'
  // buffers' barriers (0, 1) and the epilogue's (2); dO (the caller's strides) and G by cp.async.
  // The rows past the chunk's end, which the copy engine reads from the next chunk, are zeroed
  // once landed.
  uint64_t* bars = reinterpret_cast<uint64_t*>(at + L::kBars);
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 3) bar(threadIdx.x).Init();
  __syncthreads();
  const int row = static_cast<int>(c.row);
  // The epilogue's operands travel with the first step's tiles.
  {
    const TileGroup tiles(bar(2), with_m ? 3 : 2);
    tiles.Token(at_s + L::kQ, &b.maps.qn, k0, 1, h, row, b.s.qn + Tok(p, c.row, h, K) + k0,
                qk_stride, c.rows);
    tiles.Token(at_s + L::kK, &b.maps.kn, k0, 1, h, row, b.s.kn + Tok(p, c.row, h, K) + k0,
                qk_stride, c.rows);
    if (with_m) {
      tiles.Block(at_s + L::kM, &b.maps.M, 0, MatRow(p, chunk, h), b.s.M + Mat(p, chunk, h), kBT);
    }
  }
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  const int64_t state_row = (int64_t{chunk} * p.heads + h) * K + k0;  // of S and dS as [.., V]
  const bf16* S = b.s.S + State(p, chunk, h) + int64_t{k0} * V;
  const bf16* dS = b.s.dS + State(p, chunk, h) + int64_t{k0} * V;
  const bf16* dy_chunk = TokPtr(b.s.dY, p, c, 0, h, V);
  const bf16* ut_chunk = TokPtr(b.s.Ut, p, c, 0, h, V);
  const bf16* d_o_chunk = p.d_o + In(p.v_strides, c.batch, c.t0, h);
  const auto issue_step = [&](int n) {
    const uint32_t buf = at_s + (n & 1) * L::kStep;
    const int v0 = n * kBT;
    const TileGroup tiles(bar(n & 1), 4);
    tiles.Block(buf + L::kS * kSwizzledTileBytes, &b.maps.S, v0, state_row, S + v0, V);
    tiles.Block(buf + L::kDS * kSwizzledTileBytes, &b.maps.dS, v0, state_row, dS + v0, V);
    IssueSwizzledTile(buf + L::kDO * kSwizzledTileBytes, d_o_chunk + v0, p.v_strides.token, c.rows);
    tiles.Token(buf + L::kDY * kSwizzledTileBytes, &b.maps.dy, v0, 1, h, row, dy_chunk + v0,
                tok_stride, c.rows);
    tiles.Token(buf + L::kUt * kSwizzledTileBytes, &b.maps.ut, v0, 1, h, row, ut_chunk + v0,
                tok_stride, c.rows);
    __pipeline_commit();
  };

  // The warpgroup's two products: A fragments from tiles a0 and a1, B from b0 and b1 (K-major:
  // the B rows are the tiles' rows). Warpgroup 0's a0 and a1 are both dO, loaded twice so that
  // both warpgroups run the same instructions (a product under a branch on the warpgroup is
  // serialised, see below); passing one fragment set to both products was not measured.
  const int a0 = group == 0 ? L::kDO : L::kUt, a1 = group == 0 ? L::kDO : L::kDY;
  const int b0 = group == 0 ? L::kS : L::kDS, b1 = group == 0 ? L::kUt : L::kS;
  const SwizzledAOperand<false> a0_op(at_s + a0 * kSwizzledTileBytes),
      a1_op(at_s + a1 * kSwizzledTileBytes);
  const uint64_t b0_desc = wgmma::DescriptorSwizzle128(at_s + b0 * kSwizzledTileBytes);
  const uint64_t b1_desc = wgmma::DescriptorSwizzle128(at_s + b1 * kSwizzledTileBytes);
  GroupAcc64 acc0, acc1;  // group 0: S dO, dM / scale; group 1: dKd, dY S^T
  acc0.Zero(), acc1.Zero();
  float state_dot = 0.0f;
  const int steps = V / kBT;
  // dAb's packed tile (WYBackward's, [chunks x H x 64, 64]; Scratch::dAb) comes as a step of its
  // own after the last, into the dY slot of the buffer it leaves free.
  const uint32_t dab_tiles = at_s + (steps & 1) * L::kStep + L::kDY * kSwizzledTileBytes;
  issue_step(0);
  for (int n = 0; n < steps; ++n) {
    if (n + 1 < steps) {
      issue_step(n + 1);
      __pipeline_wait_prior(1);
    } else {
      const TileGroup tiles(bar(steps & 1), 1);
      tiles.Block(dab_tiles, &b.maps.dab, 0, MatRow(p, chunk, h), b.s.dAb + Mat(p, chunk, h), kBT);
      __pipeline_wait_prior(0);
    }
    bar(n & 1).Wait(n >> 1);
    if (n == 0) bar(2).Wait(0);
    if (c.rows < kBT) {  // dY and Ut (adjacent), and the keys and queries (adjacent)
      ZeroRowsPast(reinterpret_cast<bf16*>(at + (n & 1) * L::kStep + L::kDY * kSwizzledTileBytes),
                   2, c.rows);
      if (n == 0) ZeroRowsPast(reinterpret_cast<bf16*>(at + L::kQ), 2, c.rows);
    }
    wgmma::FenceSharedForProducts();
    __syncthreads();                    // step n's tiles (and the epilogue's) are in
    if (n == 0 && threadIdx.x < kBT) {  // for the epilogue, whose barriers publish them
      gamma[threadIdx.x] = expf(G[threadIdx.x]);
      decay[threadIdx.x] = expf(G[c.rows - 1] - G[threadIdx.x]);
    }
    const uint32_t buf = (n & 1) * L::kStep;
    uint32_t f0[4][4], f1[4][4];
#pragma unroll
    for (int s = 0; s < 4; ++s) a0_op.Load(f0[s], buf, s), a1_op.Load(f1[s], buf, s);
    wgmma::Fence();
    // The same instructions in both warpgroups (only the descriptors and fragments differ): a
    // product under a branch on the warpgroup serialises the products (ptxas C7520).
    const uint64_t step = buf / 16;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      wgmma::MmaRegA<kBT, false, false>(acc0.d, f0[s], b0_desc + step + s * 2);
      wgmma::MmaRegA<kBT, false, false>(acc1.d, f1[s], b1_desc + step + s * 2);
    }
    wgmma::Commit();
    if constexpr (kGated) {
      state_dot += TileDotPart16B(at_s + buf + L::kS * kSwizzledTileBytes,
                                  at_s + buf + L::kDS * kSwizzledTileBytes);
    }
    wgmma::Wait<0>();
    __syncthreads();  // buffer n % 2 is free for step n + 2
  }

  // The first buffer's S and dS' become dMD's hi and lo tiles (dmd_at: their generic address).
  const uint32_t dmd_hi = at_s, dmd_lo = at_s + kSwizzledTileBytes;
  char* const dmd_at = at;
  const int last = c.rows - 1;
  float row_value[2] = {};  // the lane's part of its two rows' dG terms
  if (group == 1) {
    // The rows' key terms exp(G_L - G_i) k_i . dKd_i (the last row's left out of both sums, see
    // RowTermsKernel), and gamma_i k_i . dX_i = -gamma_i k_i . (dY S^T)_i.
    float keys = 0.0f, kx[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = GroupAcc64::Row(hr);
      float key = 0.0f, k_ys = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 kv = SwizzledPairAt(at_s + L::kK, r, GroupAcc64::Col(j));
        if constexpr (kGated) {
          key += kv.x * acc0.d[4 * j + 2 * hr] + kv.y * acc0.d[4 * j + 2 * hr + 1];
        }
        k_ys += kv.x * acc1.d[4 * j + 2 * hr] + kv.y * acc1.d[4 * j + 2 * hr + 1];
      }
      const float k_term = r == last ? 0.0f : decay[r] * key;
      keys += k_term;
      row_value[hr] = -k_term;
      kx[hr] = -gamma[r] * k_ys;
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      kx[hr] += __shfl_xor_sync(0xffffffffu, kx[hr], 1);
      kx[hr] += __shfl_xor_sync(0xffffffffu, kx[hr], 2);
      if (threadIdx.x % 4 == 0) kx_rows[GroupAcc64::Row(hr)] = kx[hr];
    }
    if constexpr (kGated) {
      keys = WarpSum(keys);
      if (threadIdx.x % 32 == 0) warp_sums[kWarps + warp - 4] = keys;
    }
  } else if constexpr (!kGated) {
    // dMD = scale tril(dM) as hi + lo bf16 tiles.
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = GroupAcc64::Col(j);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = GroupAcc64::Row(hr);
        const float f = r < c.rows ? p.scale : 0.0f;
        const int off = SwizzledAt(r, col);
        tile::StoreSplitBf16Pair(reinterpret_cast<bf16*>(dmd_at + off),
                                 reinterpret_cast<bf16*>(dmd_at + (dmd_lo - dmd_hi) + off),
                                 col <= r ? f * acc1.d[4 * j + 2 * hr] : 0.0f,
                                 col + 1 <= r ? f * acc1.d[4 * j + 2 * hr + 1] : 0.0f);
      }
    }
  } else {
    // dMD = scale tril(dM) * D as hi + lo bf16 tiles (StoreSplitBf16Pair); the first slice's
    // P = dM * M (strictly lower) summed by rows and columns; scale gamma_i q_i . (S dO)_i.
    float p_row[2] = {}, q_dot[2] = {};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = GroupAcc64::Col(j);
      float p_col[2] = {};
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = GroupAcc64::Row(hr);
        const float f = r < c.rows ? p.scale : 0.0f;
        const float dm0 = acc1.d[4 * j + 2 * hr], dm1 = acc1.d[4 * j + 2 * hr + 1];
        const int off = SwizzledAt(r, col);
        tile::StoreSplitBf16Pair(
            reinterpret_cast<bf16*>(dmd_at + off),
            reinterpret_cast<bf16*>(dmd_at + (dmd_lo - dmd_hi) + off),
            col <= r ? f * dm0 * ptx::Exp2((G[r] - G[col]) * ptx::kRcpLn2) : 0.0f,
            col + 1 <= r ? f * dm1 * ptx::Exp2((G[r] - G[col + 1]) * ptx::kRcpLn2) : 0.0f);
        if (first_slice) {
          const float2 mv = SwizzledPairAt(at_s + L::kM, r, col);
          const float p0 = col < r ? f * dm0 * mv.x : 0.0f,
                      p1 = col + 1 < r ? f * dm1 * mv.y : 0.0f;
          p_row[hr] += p0 + p1;
          p_col[0] += p0, p_col[1] += p1;
        }
        const float2 qv = SwizzledPairAt(at_s + L::kQ, r, col);
        q_dot[hr] += qv.x * acc0.d[4 * j + 2 * hr] + qv.y * acc0.d[4 * j + 2 * hr + 1];
      }
      if (first_slice) {  // the columns' sums over the warp's rows (the lanes of one t)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          for (int off = 4; off < 32; off *= 2) {
            p_col[e] += __shfl_xor_sync(0xffffffffu, p_col[e], off);
          }
        }
        if (threadIdx.x % 32 < 4) {
          *reinterpret_cast<float2*>(col_parts + warp * kBT + col) =
              make_float2(p_col[0], p_col[1]);
        }
      }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      row_value[hr] = p_row[hr] + p.scale * gamma[GroupAcc64::Row(hr)] * q_dot[hr];
    }
  }
  if constexpr (kGated) {  // the rows' parts over the quad (its four lanes hold the same two rows)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      row_value[hr] += __shfl_xor_sync(0xffffffffu, row_value[hr], 1);
      row_value[hr] += __shfl_xor_sync(0xffffffffu, row_value[hr], 2);
      if (threadIdx.x % 4 == 0) row_parts[group * kBT + GroupAcc64::Row(hr)] = row_value[hr];
    }
    state_dot = WarpSum(state_dot);
    if (threadIdx.x % 32 == 0) warp_sums[warp] = state_dot;
  }
  __syncthreads();  // dMD and every part of dG are in

  bar(steps & 1).Wait(steps >> 1);  // dAb's tile is in

  // dq = scale diag(gamma) S dO + dMD K;  dk = diag(exp(G_L - G)) dKd - diag(beta gamma) dY S^T +
  // dMD^T Q + (dAb + dAb^T) K (B = the key or query tile, N-major), dMD as hi + lo and dAb + dAb^T
  // as dAb_p + dAb_p^T (the packed tile, read transposed for dAb_p^T).
  const uint64_t qk_desc = wgmma::DescriptorSwizzle128(at_s + (group == 0 ? L::kK : L::kQ));
  const uint64_t k_desc = wgmma::DescriptorSwizzle128(at_s + L::kK);
  const uint64_t dab_desc = wgmma::DescriptorSwizzle128(dab_tiles);
  uint32_t fh[4][4], fl[4][4];
  if (group == 0) {
    const SwizzledAOperand<false> md(dmd_hi);
#pragma unroll
    for (int s = 0; s < 4; ++s) md.Load(fh[s], 0, s), md.Load(fl[s], dmd_lo - dmd_hi, s);
    acc0.ScaleRows([&](int r) { return p.scale * gamma[r]; });
  } else {
    const SwizzledAOperand<true> md(dmd_hi);
#pragma unroll
    for (int s = 0; s < 4; ++s) md.Load(fh[s], 0, s), md.Load(fl[s], dmd_lo - dmd_hi, s);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = GroupAcc64::Row(e / 2), i = 4 * j + e;
        acc0.d[i] = decay[r] * acc0.d[i] - beta[r] * gamma[r] * acc1.d[i];
      }
    }
  }
  acc1.Zero();  // warpgroup 1: dAb_p K + dAb_p^T K; warpgroup 0: the same products, not used
  wgmma::Fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    wgmma::MmaRegA<kBT, false, true>(acc0.d, fh[s], qk_desc + s * 128);
    wgmma::MmaRegA<kBT, false, true>(acc0.d, fl[s], qk_desc + s * 128);
  }
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    wgmma::MmaSharedA64<true>(acc1.d, dab_desc + s * 2, k_desc + s * 128);
    wgmma::MmaSharedA64<true, true>(acc1.d, dab_desc + s * 128, k_desc + s * 128);
  }
  wgmma::Commit();
  // The slice's parts of dbeta and (gated) dG, while the products run.
  if (threadIdx.x >= kThreads - kBT) {
    const int r = threadIdx.x - (kThreads - kBT);
    b.s.kx_parts[DGPart(p, chunk, h, slice) + r] = r < c.rows ? kx_rows[r] : 0.0f;
  }
  if (kGated && threadIdx.x >= kThreads - kBT) {
    const int r = threadIdx.x - (kThreads - kBT);
    float dG = row_parts[r] + row_parts[kBT + r];
    if (first_slice) {
      dG -= (col_parts[r] + col_parts[kBT + r]) + (col_parts[2 * kBT + r] + col_parts[3 * kBT + r]);
    }
    if (r == last) {
      float state = 0.0f, key_sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) state += warp_sums[w];
      for (int w = 0; w < 4; ++w) key_sum += warp_sums[kWarps + w];
      dG += gamma[r] * state + key_sum;
    }
    b.s.dG_parts[DGPart(p, chunk, h, slice) + r] = r < c.rows ? dG : 0.0f;
  }
  wgmma::Wait<0>();
  if (group == 1) {
#pragma unroll
    for (int i = 0; i < 32; ++i) acc0.d[i] += acc1.d[i];
  }
  // dq (group 0) or dk (group 1): of the normalised rows with the l2norm (fp32, FinishRows'),
  // else the gradients themselves.
  if (p.qk_l2norm) {
    acc0.StoreRows(TokPtr(group == 0 ? b.s.dq_normed : b.s.dk_normed, p, c, 0, h, K) + k0,
                   qk_stride, c.rows);
  } else {
    acc0.StoreRows((group == 0 ? p.dq : p.dk) + In(p.qk_strides, c.batch, c.t0, h) + k0,
                   p.qk_strides.token, c.rows);
  }
#endif
}

}  // namespace flame::kernels::delta_chunk::tiles
