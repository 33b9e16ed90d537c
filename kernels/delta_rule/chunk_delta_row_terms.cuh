// The backward's row terms of the chunked delta rule, per (chunk, 64-wide K slice, head), with S
// and dS' the chunk's entering state and leaving-state gradient (formulas in chunk_delta_steps.h),
// dMD = scale tril(dO Ut^T) * D, P = scale tril(dO Ut^T) * M, and WYBackward's dY = T^T dUt and
// dAb + dAb^T:
//   dq   = scale diag(gamma) dO S^T + dMD K                 (complete: the WY form has no q)
//   dk   = diag(exp(G_L - G)) Ut dS'^T + dMD^T Q + diag(beta gamma) dX + (dAb + dAb^T) K,
//          dX = -dY S^T                                     (complete)
//   and the slice's parts of each row's dG,
//     scale gamma_i q_i.(S dO)_i - exp(G_L - G_i) k_i.dKd_i + [first slice] rowsum_i(P) -
//     colsum_i(P) + [last row] gamma_L <S, dS'> + sum_m exp(G_L - G_m) k_m.dKd_m,
//   and of gamma_i k_i.dX_i (dbeta's; times beta_i, dG's)
// dq and dk are written as bf16 (as fp32 to the scratch with the l2norm, FinishRowsKernel's
// input); RowGradSumsKernel sums the slices' parts.
//
// One block per (chunk, K slice, head), the slices of a chunk adjacent in blockIdx.x: a block
// loops over V for its slice only, and the chunk's dY, Ut and dO tiles, which every slice reads,
// come from L2 for all but the first of the neighbouring blocks (one block looping over all K
// slices re-read them per slice; at (8, 4096, 8, 256) the split took the kernel from 3.53 to
// 3.01 ms per call on the H200). Every slice forms dO Ut^T (one product in five), which dq and
// dk need whole: recomputing it beats a round trip through memory and a kernel of its own (the
// row gradients, when a second kernel took dM, S dO, dKd and dX from fp32 scratch, cost 1240 us
// per call at (1,8192,96,128) beside this kernel's 915; it took 1192 with their work, 1138 since
// its epilogue's instructions were cut).
//
// Each V step copies its five bf16 tiles with cp.async, all in flight at once (S and dS' as the
// state passes copied them, dO, Ut and dY), and every product is a bf16 product accumulated in
// registers over V; dY S^T and S dO share the S fragments. After the loop dMD becomes two bf16
// tiles (hi + lo, StoreSplitBf16Pair) while dAb's packed tile arrives (dAb + dAb^T = dab + dab^T,
// Scratch::dAb), and dq and dk take their bf16 products with the slice's k and q tiles onto the
// accumulators they started in.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Shared memory: the V step's five bf16 tiles (leading dimension kLdBf16: S, dS', dO, dY, Ut),
// whose space dMD's two bf16 tiles (over S and dS') and dAb's packed tile (over dO) take after
// the loop; the slice's q and k tiles; M (bf16), the first slice's; G, beta and the rows' factors
// gamma and exp(G_L - G); the row parts of dG and of gamma_i k_i.dX_i (four warps per row); P's
// column sums (two warps per column); the warps' parts of <S, dS'> and of the decayed key sum.
struct RowTermsLayout {
  static constexpr int kStep = 5 * kBf16Tile * 2;  // bytes
  static constexpr int kQK = kStep;
  static constexpr int kM = kQK + 2 * kBf16Tile * 2;
  static constexpr int kG = kM + kBf16Tile * 2;
  static constexpr int kRowParts = kG + 4 * kBT * 4;
  static constexpr int kKxParts = kRowParts + tile::kAcc64ColumnTiles * kBT * 4;
  static constexpr int kColParts = kKxParts + tile::kAcc64ColumnTiles * kBT * 4;
  static constexpr int kWarpSums = kColParts + 2 * kBT * 4;
  static constexpr int kBytes = kWarpSums + 2 * kWarps * 4;
  static_assert(4 * kBf16Tile * 2 <= kStep, "dMD's and dAb's tiles fit in the step's");
};
inline size_t RowTermsSmem() { return RowTermsLayout::kBytes; }

// One V step's four products over its 64 columns, from the step's tiles (kLdBf16):
//   sdo += dO S^T,  ys += dY S^T,  dkd += Ut dS'^T,  dm += dO Ut^T,
// interleaved per 16-deep k step, so that their sixteen accumulator chains are independent and
// every fragment is loaded once (dO's for two products, S's for two).
__device__ __forceinline__ void RowTermsStepProducts(Acc& sdo, Acc& ys, Acc& dkd, Acc& dm,
                                                     const bf16* s, const bf16* ds, const bf16* d_o,
                                                     const bf16* dy, const bf16* ut) {
  using tile::Bf16AOperand, tile::Bf16BOperand;
  const int col = Acc::Col();
  // B(l, j) = X(j, l): the columns of the products are the rows of S, dS' and Ut.
  const Bf16BOperand<false> b_s(s + col * kLdBf16, kLdBf16), b_ds(ds + col * kLdBf16, kLdBf16),
      b_ut(ut + col * kLdBf16, kLdBf16);
  Bf16AOperand<true> a_do[2], a_dy[2], a_ut[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = Acc::Row(i) * kLdBf16;
    a_do[i] = {d_o + row, kLdBf16};
    a_dy[i] = {dy + row, kLdBf16};
    a_ut[i] = {ut + row, kLdBf16};
  }
  using tile::MmaWarp16Step;
#pragma unroll
  for (int l = 0; l < kBT; l += 16) {
    uint32_t fs[4], fds[4], fut[4];
    b_s.Load(fs, l);
    b_ds.Load(fds, l);
    b_ut.Load(fut, l);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      uint32_t fdo[4], fdy[4], fa_ut[4];
      a_do[i].Load(fdo, l);
      a_dy[i].Load(fdy, l);
      a_ut[i].Load(fa_ut, l);
      MmaWarp16Step(sdo.part[i], fdo, fs);
      MmaWarp16Step(ys.part[i], fdy, fs);
      MmaWarp16Step(dkd.part[i], fa_ut, fds);
      MmaWarp16Step(dm.part[i], fdo, fut);
    }
  }
}

// kGated: b.gated. Ungated (the delta rule, G = 0) the kernel forms no part of dG, as
// RowTermsWgmmaKernel (chunk_delta_row_terms_wgmma.cuh).
template <bool kGated>
__global__ void __launch_bounds__(kThreads, 2) RowTermsKernel(StepBase b) {
  using L = RowTermsLayout;
  extern __shared__ float4 smem4[];
  char* at = reinterpret_cast<char*>(smem4);
  bf16* s = reinterpret_cast<bf16*>(at);
  bf16* ds = s + kBf16Tile;
  bf16* d_o = ds + kBf16Tile;
  bf16* dy = d_o + kBf16Tile;
  bf16* ut = dy + kBf16Tile;
  bf16* dmd_hi = reinterpret_cast<bf16*>(at);  // after the loop: dMD = dmd_hi + dmd_lo
  bf16* dmd_lo = dmd_hi + kBf16Tile;
  bf16* dab = d_o;  // and dAb's packed tile (Scratch::dAb): dAb + dAb^T = dab + dab^T
  bf16* q = reinterpret_cast<bf16*>(at + L::kQK);
  bf16* k = q + kBf16Tile;
  bf16* M = reinterpret_cast<bf16*>(at + L::kM);  // the first slice's
  float* G = reinterpret_cast<float*>(at + L::kG);
  float* gamma = G + kBT;
  float* decay = gamma + kBT;  // exp(G_L - G)
  float* beta = decay + kBT;
  float* row_parts = reinterpret_cast<float*>(at + L::kRowParts);
  float* kx_parts = reinterpret_cast<float*>(at + L::kKxParts);
  float* col_parts = reinterpret_cast<float*>(at + L::kColParts);  // [2][64]: P's column sums
  float* warp_sums = reinterpret_cast<float*>(at + L::kWarpSums);  // [2][kWarps]
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT;
  const int chunk = blockIdx.x / nk, slice = blockIdx.x % nk, k0 = slice * kBT, h = blockIdx.y;
  const bool first_slice = slice == 0;
  const Chunk c = LocateChunk(p, chunk);
  const int64_t qk_stride = int64_t{p.heads} * K;
  // The operands of the epilogue travel with the first step's tiles.
  const TokTilePieces qk_pieces(qk_stride);
  qk_pieces.Issue(q, b.s.qn + Tok(p, c.row, h, K) + k0, c.rows, 1);
  qk_pieces.Issue(k, b.s.kn + Tok(p, c.row, h, K) + k0, c.rows, 1);
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  if (kGated && first_slice) {  // M: only for dG's P sums
    TokTilePieces(kBT).Issue(M, b.s.M + Mat(p, chunk, h), kBT, 1);
  }
  const bf16* S = b.s.S + State(p, chunk, h) + int64_t{k0} * V;
  const bf16* dS = b.s.dS + State(p, chunk, h) + int64_t{k0} * V;
  const bf16* dy_chunk = TokPtr(b.s.dY, p, c, 0, h, V);
  const bf16* ut_chunk = TokPtr(b.s.Ut, p, c, 0, h, V);
  const int64_t tok_stride = int64_t{p.heads} * V;
  const bf16* d_o_chunk = p.d_o + In(p.v_strides, c.batch, c.t0, h);
  // ut_pieces: the rows of Ut and of dY.
  const TokTilePieces d_o_pieces(p.v_strides.token), state_pieces(V), ut_pieces(tok_stride);
  float state_dot = 0.0f;
  Acc sdo, ys, dkd, dm;  // S dO, dY S^T (= -dX), dKd, dM / scale
  sdo.Zero(), ys.Zero(), dkd.Zero(), dm.Zero();
  for (int v0 = 0; v0 < V; v0 += kBT) {
    // The tiles' earlier readers are behind the barrier that ended the previous step.
    state_pieces.Issue(s, S + v0, kBT, 1);
    state_pieces.Issue(ds, dS + v0, kBT, 1);
    ut_pieces.Issue(dy, dy_chunk + v0, c.rows, 1);
    ut_pieces.Issue(ut, ut_chunk + v0, c.rows, 1);
    d_o_pieces.Issue(d_o, d_o_chunk + v0, c.rows, 1);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    if (v0 == 0 && threadIdx.x < kBT) {  // for after the loop, whose barriers publish them
      gamma[threadIdx.x] = expf(G[threadIdx.x]);
      decay[threadIdx.x] = expf(G[c.rows - 1] - G[threadIdx.x]);
    }
    RowTermsStepProducts(sdo, ys, dkd, dm, s, ds, d_o, dy, ut);
    if constexpr (kGated) state_dot += tile::TileDotPart(s, ds, kLdBf16);  // <S, dS'>, this step's
    __syncthreads();
  }
  // dAb's packed tile (WYBackward's), while dMD and the row parts form.
  TokTilePieces(kBT).Issue(dab, b.s.dAb + Mat(p, chunk, h), kBT, 1);
  __pipeline_commit();
  // The rows' dG parts from S dO and dKd before they become dq and dk, scale gamma_i q_i.SdO_i
  // - exp(G_L - G_i) k_i.dKd_i, and the lane's part of the decayed keys' sum (the last row's).
  // The last row's own key term is in both with opposite signs (its decay is exp(0) = 1) and is
  // left out of both: summed in different orders, the two would leave a rounding residue of
  // k_L.dKd_L's size in a dG that strong decay makes near zero (da then failed its bar at
  // gate normaliser 100).
  float keys = 0.0f;
  if constexpr (kGated) {
    tile::StoreRowSumParts(row_parts, [&](int r, int col, int i, int e) {
      const float2 qv = tile::TilePairAt(q, r, col), kv = tile::TilePairAt(k, r, col);
      const float key = r == c.rows - 1
                            ? 0.0f
                            : decay[r] * (kv.x * dkd.part[i].x[e] + kv.y * dkd.part[i].x[e + 1]);
      keys += key;
      return p.scale * gamma[r] * (qv.x * sdo.part[i].x[e] + qv.y * sdo.part[i].x[e + 1]) - key;
    });
  }
  // gamma_i k_i.dX_i = -gamma_i k_i.(dY S^T)_i; then dY S^T joins dk's accumulator, so that it is
  // not held through dMD's forming (held there, the kernel spilled on sm_80).
  tile::StoreRowSumParts(kx_parts, [&](int r, int col, int i, int e) {
    const float2 kv = tile::TilePairAt(k, r, col);
    return -gamma[r] * (kv.x * ys.part[i].x[e] + kv.y * ys.part[i].x[e + 1]);
  });
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int r = Acc::ElementRow(i, e);
      dkd.part[i].x[e] = decay[r] * dkd.part[i].x[e] - beta[r] * gamma[r] * ys.part[i].x[e];
    }
  }
  // dMD as the sum of two bf16 tiles over the step's (hi, and the rest of its fp32 value: 16
  // bits of mantissa, beyond TF32's 11), for bf16 products read by ldmatrix either way round.
  // Each decay exp(G_r - G_j) is one MUFU.EX2 (ptx::Exp2; terms past the diagonal, whose exponent
  // is positive, are selected away), with no branch per element: expf's range test and a branch
  // per element around the loads of G took ~800 of the kernel's ~2100 SASS instructions (now
  // ~320). With them, the first slice's P = dM * M (strictly lower), summed over the lane's
  // rows and columns in registers (as a tile summed by rows and columns it took a 17 KB tile,
  // and a loop of strided loads after a barrier): rowsum_i(P) joins the row parts, colsum_i(P)
  // has its own.
  float p_row[4] = {};  // [2 i + half]: row ElementRow(i, 2 half)
  float p_col[4] = {};  // [2 n8 + b]: column ElementCol(4 n8 + b)
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const int r = Acc::ElementRow(i, e), col = Acc::ElementCol(e);
      const float dm0 = dm.part[i].x[e], dm1 = dm.part[i].x[e + 1];
      const float f = r < c.rows ? p.scale : 0.0f;
      const float d0 = kGated ? ptx::Exp2((G[r] - G[col]) * ptx::kRcpLn2) : 1.0f;
      const float d1 = kGated ? ptx::Exp2((G[r] - G[col + 1]) * ptx::kRcpLn2) : 1.0f;
      tile::StoreSplitBf16Pair(dmd_hi + r * kLdBf16 + col, dmd_lo + r * kLdBf16 + col,
                               col <= r ? f * dm0 * d0 : 0.0f, col + 1 <= r ? f * dm1 * d1 : 0.0f);
      if (kGated && first_slice) {
        const float2 mv = tile::TilePairAt(M, r, col);
        const float p0 = col < r ? f * dm0 * mv.x : 0.0f, p1 = col + 1 < r ? f * dm1 * mv.y : 0.0f;
        p_row[2 * i + e / 2 % 2] += p0 + p1;
        p_col[e / 4 * 2] += p0;
        p_col[e / 4 * 2 + 1] += p1;
      }
    }
  }
  if (kGated && first_slice) {
    tile::StoreRowSumParts(
        row_parts, [&](int, int, int i, int e) { return e < 4 ? p_row[2 * i + e / 2] : 0.0f; },
        true);
    tile::StoreColumnSumParts(col_parts, p_col);
  }
  if constexpr (kGated) {
    state_dot = WarpSum(state_dot);
    keys = WarpSum(keys);
    if (threadIdx.x % 32 == 0) {
      warp_sums[threadIdx.x / 32] = state_dot;
      warp_sums[kWarps + threadIdx.x / 32] = keys;
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // dMD, dAb's tile and every row part are in
  sdo.Transform([&](int r, int, float v) { return p.scale * gamma[r] * v; });
  tile::MmaSplitBf16Acc64<true, true>(sdo, kBT, dmd_hi, kLdBf16, kBf16Tile, k, kLdBf16);
  if (p.qk_l2norm) {
    StoreAccRows(sdo, TokPtr(b.s.dq_normed, p, c, 0, h, K) + k0, qk_stride, c.rows);
  } else {
    StoreAccRows(sdo, p.dq + In(p.qk_strides, c.batch, c.t0, h) + k0, p.qk_strides.token, c.rows);
  }
  tile::MmaSplitBf16Acc64<false, true>(dkd, kBT, dmd_hi, kLdBf16, kBf16Tile, q, kLdBf16);
  tile::MmaBf16Acc64<true, true>(dkd, kBT, dab, kLdBf16, k, kLdBf16);   // dab K
  tile::MmaBf16Acc64<false, true>(dkd, kBT, dab, kLdBf16, k, kLdBf16);  // dab^T K
  if (p.qk_l2norm) {
    StoreAccRows(dkd, TokPtr(b.s.dk_normed, p, c, 0, h, K) + k0, qk_stride, c.rows);
  } else {
    StoreAccRows(dkd, p.dk + In(p.qk_strides, c.batch, c.t0, h) + k0, p.qk_strides.token, c.rows);
  }
  if (kGated && threadIdx.x < kBT) {
    const int r = threadIdx.x;
    float dG = tile::RowSum(row_parts, r);
    if (first_slice) dG -= col_parts[r] + col_parts[kBT + r];
    if (r == c.rows - 1) {
      float state = 0.0f, key_sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) state += warp_sums[w], key_sum += warp_sums[kWarps + w];
      dG += gamma[r] * state + key_sum;
    }
    b.s.dG_parts[DGPart(p, chunk, h, slice) + r] = r < c.rows ? dG : 0.0f;
  }
  if (threadIdx.x < kBT) {
    const int r = threadIdx.x;
    b.s.kx_parts[DGPart(p, chunk, h, slice) + r] = r < c.rows ? tile::RowSum(kx_parts, r) : 0.0f;
  }
}

}  // namespace flame::kernels::delta_chunk::tiles
