// The backward through the WY representation of the chunked delta rule (formulas in
// chunk_delta_steps.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_grid.cuh"
#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// The k steps of WYBackward's products for this warp's two C tiles (tile::PartK; row tile I =
// Acc64::Row(i) / 16, column tile J = Acc64::Col() / 16), whose other steps multiply zero blocks
// (T is unit lower triangular, its blocks above the diagonal exactly zero) or give elements that
// are not used.
struct WYProductSteps {
  static constexpr int kRows = 16;  // of a C tile

  // T^T times a slice: k >= I.
  __device__ static tile::PartK TransposedTSteps() {
    return Make([](int I, int, int* b, int* e) { *b = kRows * I, *e = kBT; });
  }
  // dY Ut^T, of which the strictly lower part is used: tiles with I >= J, every k.
  __device__ static tile::PartK LowerTiles() {
    return Make([](int I, int J, int* b, int* e) { *b = 0, *e = I >= J ? kBT : 0; });
  }

 private:
  template <typename F>
  __device__ static tile::PartK Make(F f) {
    tile::PartK k;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      f(Acc::Row(i) / kRows, Acc::Col() / kRows, &k.begin[i], &k.end[i]);
    }
    return k;
  }
};

// Shared memory: T as a split tile (bf16 hi + lo, tile::kLdSplit; read transposed by ldmatrix);
// two slice buffers of three bf16 tiles (dUt, v, Ut: dUt and v adjacent, so that dY's split tile
// takes their place once they are read); G and beta; the row parts of v . dY and of rowsum(t)
// (four warps per row) and the column parts of t^T beta (two warps per column). The packed matrix
// TKD (fp32; T on and below the diagonal, KD^T above it) arrives in the second buffer, and again in
// the buffer the last slice leaves free, where its KD is read; dAb (packed) goes to the last
// slice's buffer. 75.8 KB: three blocks per multiprocessor on the H200.
struct WYBackwardLayout {
  static constexpr int kSlice = 3 * kBf16Tile * 2;  // bytes
  static constexpr int kSplitTile = kBT * tile::kLdSplit * 2;
  static constexpr int kT = 0;
  static constexpr int kBuffers = kT + kSplitTile;
  static constexpr int kG = kBuffers + 2 * kSlice;
  static constexpr int kVdyParts = kG + 2 * kBT * 4;
  static constexpr int kTRowParts = kVdyParts + tile::kAcc64ColumnTiles * kBT * 4;
  static constexpr int kTColParts = kTRowParts + tile::kAcc64ColumnTiles * kBT * 4;
  static constexpr int kBytes = kTColParts + 2 * kBT * 4;
  static_assert(kSplitTile <= 2 * kBf16Tile * 2, "dY's split tile fits in dUt's and v's space");
  static_assert(kTile * 4 <= kSlice, "an fp32 tile (TKD) fits in a slice buffer");
};

// Per (chunk, head), with Y = diag(beta) V, X = diag(beta gamma) K (chunk_delta_steps.h):
//   dY  = T^T dUt                      (bf16 to the scratch: RowTerms' dX = -dY S^T)
//   dv  = diag(beta) dY                (bf16, to the output)
//   dA  = -strict_tril(dY Ut^T)        (the gradient through T = (I + A)^-1)
//   dAb = diag(beta) dA * D            (strictly lower; to the scratch as one bf16 matrix, hi
//                                       below the diagonal, lo transposed above it (Scratch::dAb),
//                                       for RowTerms' dk += (dAb + dAb^T) K)
// and, with t = dA * KD (KD = strict_tril(K K^T * D), ChunkPrepare's, in TKD), the rows' parts
// of the scalar gradients that need no key slice:
//   dG_i    = beta_i rowsum_i(t) - (t^T beta)_i       (to dG; the gated rule only)
//   dbeta_i = rowsum_i(t) + v_i . dY_i                (to p.dbeta, before the sigmoid)
// RowGradSumsKernel adds RowTerms' parts (with k_i . dX_i).
//
// One pass over 64-wide slices of V, each (dUt, v, Ut) arriving by cp.async, double-buffered (slice
// n + 1 copied while slice n is multiplied). A slice's dY is a product of T's split tile (read
// transposed) and dUt's, which leaves for dY and dv from the registers, with v . dY against the v
// tile; it then becomes a split tile (hi + lo) over dUt's and v's space, and dA takes its product
// with Ut^T. Measured on the H200 at (1, 8192, 96, 128), per call: 493 us (1030 MB read, 591
// written), RowTerms 868. (Before, RowTerms ran first and stored dW = -dUt S^T and dk's row terms
// in fp32; here dT = tril(dW X^T + dUt Y^T), Z = dT T^T, dA = -T^T Z, and dk finished in a second
// pass over the key slices, dW, k and those row terms: 803 us (1880 + 428 MB), RowTerms 849;
// forward + backward there 3.12 -> 2.83 ms.) Two things that did not help, each beside this
// kernel in one run at (1, 8192, 96, 128): the products as wgmma (dY = T^T dUt and dY Ut^T, each
// warpgroup every other value slice; 128 registers, two blocks a multiprocessor): 464 -> 495 us
// (gated 478 -> 522); both slices' copies issued at the start, TKD copied into T's space and split
// there in place: 464 -> 477 (12 bytes of spills; DRAM writes 586 -> 613 MB). dAb packed into
// one tile (Scratch::dAb) instead of dAb + dAb^T as a hi and a lo tile (four 2-byte stores an
// element, two now): 464 -> 436 us, gated 477 -> 449 (DRAM writes 586 -> 487 MB); RowTerms,
// which reads it, 663 -> 645 (reads 2040 -> 1940 MB).
// kGated: b.gated (ungated, no dG and no decays; as a runtime branch, each element of dAb took a
// branch of its own).
template <bool kGated>
__global__ void __launch_bounds__(kThreads, 3) WYBackwardKernel(StepBase b) {
  using L = WYBackwardLayout;
  using tile::kLdSplit;
  using tile::kSplitLoStep;
  extern __shared__ float4 smem4[];
  char* const at = reinterpret_cast<char*>(smem4);
  bf16* const T = reinterpret_cast<bf16*>(at + L::kT);
  const auto buffer = [&](int n) {
    return reinterpret_cast<bf16*>(at + L::kBuffers + n % 2 * L::kSlice);
  };
  float* const G = reinterpret_cast<float*>(at + L::kG);
  float* const beta = G + kBT;
  float* const vdy_parts = reinterpret_cast<float*>(at + L::kVdyParts);
  float* const t_row_parts = reinterpret_cast<float*>(at + L::kTRowParts);
  float* const t_col_parts = reinterpret_cast<float*>(at + L::kTColParts);
  const ChunkDeltaParams& p = b.p;
  const int chunk = BlockChunk(p.heads), h = BlockHead(p.heads);  // (ChunkHeadsGrid)
  const Chunk c = LocateChunk(p, chunk);
  const int V = p.v_dim, slices = V / kBT;
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  IssueMat<kLd>(reinterpret_cast<float*>(buffer(1)), b.s.TKD + Mat(p, chunk, h));
  __pipeline_commit();
  const int64_t tok_stride = int64_t{p.heads} * V;
  const TokTilePieces tok_pieces(tok_stride), v_pieces(p.v_strides.token);
  const bf16* const dut_chunk = TokPtr(b.s.dUt, p, c, 0, h, V);
  const bf16* const ut_chunk = TokPtr(b.s.Ut, p, c, 0, h, V);
  const bf16* const v_chunk = p.v + In(p.v_strides, c.batch, c.t0, h);
  bf16* const dy_chunk = TokPtr(b.s.dY, p, c, 0, h, V);
  bf16* const dv_chunk = p.dv + In(p.v_strides, c.batch, c.t0, h);
  // Slice n into buffer n % 2; after the last, TKD again (for KD; mostly from L2).
  const auto issue = [&](int n) {
    bf16* const buf = buffer(n);
    if (n < slices) {
      tok_pieces.Issue(buf, dut_chunk + n * kBT, c.rows, 1);
      v_pieces.Issue(buf + kBf16Tile, v_chunk + n * kBT, c.rows, 1);
      tok_pieces.Issue(buf + 2 * kBf16Tile, ut_chunk + n * kBT, c.rows, 1);
    } else {
      IssueMat<kLd>(reinterpret_cast<float*>(buf), b.s.TKD + Mat(p, chunk, h));
    }
    __pipeline_commit();
  };
  issue(0);
  __pipeline_wait_prior(1);
  __syncthreads();  // TKD (fp32), G and beta are in
  StoreSplitLowerT(T, reinterpret_cast<const float*>(buffer(1)));
  Acc dA;  // dY Ut^T, of which dA is minus the strictly lower part
  dA.Zero();
  for (int n = 0; n < slices; ++n) {
    __pipeline_wait_prior(0);
    // Slice n is in (and T's split tile); slice n - 1's buffer (at first T's fp32 copy) is read.
    __syncthreads();
    issue(n + 1);
    bf16* const dut = buffer(n);
    const bf16* const v = dut + kBf16Tile;
    const bf16* const ut = v + kBf16Tile;
    const int v0 = n * kBT;
    Acc dy;
    dy.Zero();
    tile::MmaSplitBf16Acc64<false, true>(dy, WYProductSteps::TransposedTSteps(), T, kLdSplit,
                                         kSplitLoStep, dut, kLdBf16);
    tile::StoreRowSumParts(
        vdy_parts,
        [&](int row, int col, int i, int e) {
          const float2 vv = tile::TilePairAt(v, row, col);
          return dy.part[i].x[e] * vv.x + dy.part[i].x[e + 1] * vv.y;
        },
        v0 > 0);
    StoreAccRows(dy, dy_chunk + v0, tok_stride, c.rows);
    __syncthreads();  // dUt and v are read: dY's split tile takes their place
    dy.StoreSplitBf16(dut, kLdSplit);
    dy.Transform([&](int row, int, float x) { return beta[row] * x; });
    StoreAccRows(dy, dv_chunk + v0, p.v_strides.token, c.rows);
    __syncthreads();  // dY's split tile is in
    tile::MmaSplitBf16Acc64<true, false>(dA, WYProductSteps::LowerTiles(), dut, kLdSplit,
                                         kSplitLoStep, ut, kLdBf16);
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // TKD is in; the last slice's buffer is read
  const float* const tkd = reinterpret_cast<const float*>(buffer(slices));
  bf16* const dAb = buffer(slices + 1);  // packed (Scratch::dAb), leading dimension kLdSplit
  // t = dA * KD in dA's registers (KD^T: TKD's strictly upper part); dAb packed: the thread of a
  // lower element writes its hi part there and its lo part at the mirror (and the diagonal's
  // zero), so that every element is written once.
  dA.Transform([&](int r, int col, float x) {
    const float da = r < c.rows && col < r ? -x : 0.0f;
    if (col < r) {
      const float ab = beta[r] * da * (kGated ? ptx::Exp2((G[r] - G[col]) * ptx::kRcpLn2) : 1.0f);
      const bf16 hi = __float2bfloat16_rn(ab);
      dAb[r * kLdSplit + col] = hi;
      dAb[col * kLdSplit + r] = __float2bfloat16_rn(ab - __bfloat162float(hi));
    } else if (col == r) {
      dAb[r * kLdSplit + r] = __float2bfloat16_rn(0.0f);
    }
    return da * tkd[col * kLd + r];  // da is 0 on and above the diagonal
  });
  // rowsum_i(t) from the registers; (t^T beta)_i from the lane's columns (StoreColumnSumParts).
  const Acc& t = dA;
  tile::StoreRowSumParts(
      t_row_parts, [&](int, int, int i, int e) { return t.part[i].x[e] + t.part[i].x[e + 1]; });
  if (kGated) {           // (the ungated rule has no dG)
    float t_col[4] = {};  // [2 n8 + b]: column ElementCol(4 n8 + b)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        t_col[e / 4 * 2 + e % 2] += beta[Acc::ElementRow(i, e)] * t.part[i].x[e];
      }
    }
    tile::StoreColumnSumParts(t_col_parts, t_col);
  }
  __syncthreads();  // dAb and the parts are in
  // dAb, packed, to the scratch in 16-byte pieces.
  bf16* const dab_out = b.s.dAb + Mat(p, chunk, h);
  ForBlockItems<kThreads, kBT * 8>([&](int idx) {
    const int r = idx / 8, c8 = idx % 8 * 8;
    *reinterpret_cast<uint4*>(dab_out + r * kBT + c8) =
        *reinterpret_cast<const uint4*>(dAb + r * kLdSplit + c8);
  });
  if (threadIdx.x < c.rows) {
    const int r = threadIdx.x;
    const float t_sum = tile::RowSum(t_row_parts, r);
    if (kGated) {
      b.s.dG[Tok(p, c.row + r, h, 1)] = beta[r] * t_sum - (t_col_parts[r] + t_col_parts[kBT + r]);
    }
    p.dbeta[In(p.scalar_strides, c.batch, c.t0 + r, h)] = t_sum + tile::RowSum(vdy_parts, r);
  }
}

inline size_t WYBackwardSmem() { return WYBackwardLayout::kBytes; }

}  // namespace flame::kernels::delta_chunk::tiles
