// The backward through the WY representation of the chunked delta rule (formulas in
// chunk_delta_steps.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// The k steps of WYBackward's triangular products for this warp's two C tiles (tile::PartK; row
// tile I = Acc64::Row(i) / 16, column tile J = Acc64::Col() / 16), whose other steps multiply
// zero blocks: T is unit lower triangular (its blocks above the diagonal exactly zero) and dT
// lower triangular. (With every step: WYBackward 299.6 us per call at (8, 2048, 16, 128), of which
// its products with T took ~70, measured by leaving them out; with these, 289.8.)
struct WYProductSteps {
  static constexpr int kRows = 16;  // of a C tile

  // dT^T's products with a slice: only its tiles on and above the diagonal are read (dT is the
  // lower triangle of its transpose).
  __device__ static tile::PartK UpperTiles() {
    return Make([](int I, int J, int* b, int* e) { *b = 0, *e = J >= I ? kBT : 0; });
  }
  // Z = dT T^T: both factors lower triangular, so k <= min(I, J).
  __device__ static tile::PartK ZSteps() {
    return Make([](int I, int J, int* b, int* e) { *b = 0, *e = kRows * (min(I, J) + 1); });
  }
  // dA = -T^T Z, of which the strictly lower part is used: k >= I, tiles with I >= J.
  __device__ static tile::PartK DASteps() {
    return Make([](int I, int J, int* b, int* e) { *b = kRows * I, *e = I >= J ? kBT : *b; });
  }
  // T^T times a slice: k >= I.
  __device__ static tile::PartK TransposedTSteps() {
    return Make([](int I, int, int* b, int* e) { *b = kRows * I, *e = kBT; });
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

// Per (chunk, head), through W = T X and U = T Y (X = diag(beta gamma) K, Y = diag(beta) V):
//   dT = tril(dW X^T + dUt Y^T);  dX = T^T dW;  dY = T^T dUt;  dA = strict_tril(-T^T dT T^T),
// and from them the rest of the gradients of k, beta and G, with dAb = diag(beta) dA * D
// (strictly lower) and t = dA * KD (KD = strict_tril(K K^T * D), ChunkPrepare's):
//   dv    = diag(beta) dY                                          (bf16, to the output)
//   dk    = dk_r + diag(beta gamma) dX + (dAb + dAb^T) K           (dk_r: RowTerms')
//   dG_i  = RowTerms' parts + beta_i gamma_i k_i.dX_i + beta_i rowsum_i(t) - (t^T beta)_i
//   dbeta_i = gamma_i k_i.dX_i + rowsum_i(t) + v_i.dY_i           (through the sigmoid when beta
//                                                                    comes as logits)
// dk is written as bf16 (with the l2norm: in fp32 over dk_r, FinishRowsKernel's input).
//
// Three passes over 64-wide slices, each arriving by cp.async in bf16 (dW and dUt as RowTerms and
// the backward state pass store them; the rows of k and v, exact): (dW, K) then (dUt, V),
// double-buffered in Z's space (1022 -> 982 us per call at (1,8192,96,128)), build dT's transpose
// in registers as bf16 products,
//   dT^T = diag(beta) (diag(gamma) K dW^T + V dUt^T)
// (the gamma scaling applied between the K and the V slices), the V slices also giving dY = T^T
// dUt, a product of T's split tile (read transposed) and the slice that leaves from the registers
// as dv, with v.dY against the v tile as copied. Once dA is whole, (dW, K, dk_r) again: dX = T^T dW
// formed a second time (a 64 x 64 x 64 product; stored and read back in fp32 it cost more in memory
// traffic), and dk finished on its accumulator. (With dX and dA in fp32 scratch for a kernel of
// their own, that kernel and this one took 1240 + 784 us per call at (1,8192,96,128); this one now
// 941.)
__global__ void __launch_bounds__(kThreads, 3) WYBackwardKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  // The fp32 operands T, dT, Z and dAb + dAb^T as split tiles (bf16 hi + lo, tile::kLdSplit),
  // which ldmatrix reads as stored or transposed: T (copied in fp32 into x, split from there
  // before the first pass); in x, dT (stored as dT^T), then KD and each slice's dk_r (fp32, kLd);
  // in y, the second buffer of the first passes, then Z, then dAb + dAb^T. As TF32 tiles, read by
  // scalar loads, these operands and the row dots' pairs took 40 M plain shared-memory loads per
  // call at (1,8192,96,128), beside 7.7 M ldmatrix; as split tiles the kernel takes 809 us there
  // instead of 825. (T split by ChunkPrepare, which stores it, cost that kernel as much time as it
  // saved here.)
  using tile::kLdSplit;
  using tile::kSplitLoStep;
  static_assert(kBT * kLdSplit * sizeof(bf16) <= kTile * sizeof(float), "a split tile fits");
  bf16* T = reinterpret_cast<bf16*>(smem4);
  float* x = reinterpret_cast<float*>(smem4) + kTile;  // T (fp32); dT (split); KD; dk_r
  float* y = x + kTile;  // the second buffer of the first passes; Z; dAb + dAb^T (split)
  bf16* const dT = reinterpret_cast<bf16*>(x);
  bf16* const Z = reinterpret_cast<bf16*>(y);
  bf16* const dAb = Z;
  float* G = y + kBT * kLdT;
  float* beta = G + kBT;
  float* gamma = beta + kBT;
  float* vdy_parts = gamma + kBT;  // per row, the four warps' parts of v . dY
  // and of rowsum_i(t) + gamma_i k_i . dX_i
  float* x_parts = vdy_parts + tile::kAcc64ColumnTiles * kBT;
  float* t_col_parts = x_parts + tile::kAcc64ColumnTiles * kBT;  // [2][64]: parts of (t^T beta)_i
  float* dG_parts = t_col_parts + 2 * kBT;                       // RowTerms' (kMaxKSlices x 64)
  bf16* grad = reinterpret_cast<bf16*>(dG_parts + kMaxKSlices * kBT);  // the slice of dW or dUt
  bf16* rows = grad + kBf16Tile;                                 // the slice's k or v rows
  static_assert(2 * kBf16Tile * 2 <= kBT * kLdT * 4, "a slice's two tiles fit in Z's space");
  const ChunkDeltaParams& p = b.p;
  const int chunk = blockIdx.x, h = blockIdx.y;
  const Chunk c = LocateChunk(p, chunk);
  IssueRowScalars(G, beta, b.s.G + Tok(p, c.row, h, 1), b.s.bt + Tok(p, c.row, h, 1), p.heads,
                  c.rows);
  IssueMat<kLd>(x, b.s.T + Mat(p, chunk, h));
  // RowTerms' parts of dG, read at the very end: copied now, so that no block waits on memory
  // there (16 bytes a thread).
  if (threadIdx.x < p.k_dim / kBT * (kBT / 4)) {
    __pipeline_memcpy_async(dG_parts + 4 * threadIdx.x,
                            b.s.dG_parts + DGPart(p, chunk, h, 0) + 4 * threadIdx.x, 16);
  }
  __pipeline_commit();
  const int64_t k_stride = int64_t{p.heads} * p.k_dim;
  const TokTilePieces k_pieces(k_stride);  // of k and dW
  const TokTilePieces v_pieces(p.v_strides.token);
  const TokTilePieces dut_pieces(int64_t{p.heads} * p.v_dim);
  const bf16* k_chunk = b.s.kn + Tok(p, c.row, h, p.k_dim);
  const bf16* dw_chunk = b.s.dW + Tok(p, c.row, h, p.k_dim);
  float* dk_rows = b.s.dk_rows + Tok(p, c.row, h, p.k_dim);
  const bf16* v_chunk = p.v + In(p.v_strides, c.batch, c.t0, h);
  const bf16* dut_chunk = b.s.dUt + Tok(p, c.row, h, p.v_dim);
  // The (dW, K) slices, then the (dUt, V) slices, double-buffered: slice n lands in buffer n % 2,
  // grad and rows or Z's space (unused until Z), while slice n - 1 is multiplied.
  const int nk = p.k_dim / kBT, slices = nk + p.v_dim / kBT;
  bf16* const second = reinterpret_cast<bf16*>(y);  // each buffer: the gradient, then the rows
  const auto issue = [&](int n) {
    bf16* g = n % 2 == 0 ? grad : second;
    if (n < nk) {
      k_pieces.Issue(g, dw_chunk + n * kBT, c.rows, 1);
      k_pieces.Issue(g + kBf16Tile, k_chunk + n * kBT, c.rows, 1);
    } else {
      dut_pieces.Issue(g, dut_chunk + (n - nk) * kBT, c.rows, 1);
      v_pieces.Issue(g + kBf16Tile, v_chunk + (n - nk) * kBT, c.rows, 1);
    }
    __pipeline_commit();
  };
  // T^T times a gradient slice (T's split tile read transposed), and the row dots of
  // the product with the slice's rows (x: k or v; with by_gamma times gamma_row), onto the
  // earlier parts with `add`.
  const auto t_times = [&](const bf16* slice, const bf16* x, float* parts, bool add,
                           bool by_gamma) {
    Acc out;
    out.Zero();
    tile::MmaSplitBf16Acc64<false, true>(out, WYProductSteps::TransposedTSteps(), T, kLdSplit,
                                         kSplitLoStep, slice, kLdBf16);
    tile::StoreRowSumParts(
        parts,
        [&](int row, int col, int i, int e) {
          const float2 xv = tile::TilePairAt(x, row, col);
          const float dot = out.part[i].x[e] * xv.x + out.part[i].x[e + 1] * xv.y;
          return by_gamma ? gamma[row] * dot : dot;
        },
        add);
    return out;
  };
  Acc dTt;  // dT^T
  dTt.Zero();
  issue(0);
  // T (with G, beta and RowTerms' parts); slice 0 may still be on its way.
  __pipeline_wait_prior(1);
  __syncthreads();
  StoreSplitTile(T, x);  // published by the loop's first barrier
  for (int n = 0; n < slices; ++n) {
    if (n + 1 < slices) {
      issue(n + 1);
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();  // slice n (and T, G, beta) are in
    const bf16* g = n % 2 == 0 ? grad : second;
    const bf16* r = g + kBf16Tile;
    if (n == 0 && threadIdx.x < kBT) gamma[threadIdx.x] = expf(G[threadIdx.x]);
    if (n == nk) dTt.Transform([&](int row, int, float v) { return v * gamma[row]; });
    tile::MmaBf16Acc64<true, false>(dTt, WYProductSteps::UpperTiles(), r, kLdBf16, g, kLdBf16);
    if (n >= nk) {
      const int v0 = (n - nk) * kBT;
      Acc dy = t_times(g, r, vdy_parts, v0 > 0, false);  // and v . dY
      dy.Transform([&](int row, int, float v) { return beta[row] * v; });
      StoreAccRows(dy, p.dv + In(p.v_strides, c.batch, c.t0, h) + v0, p.v_strides.token, c.rows);
    }
    __syncthreads();  // buffer n % 2 is free for slice n + 2 (gamma is in)
  }
  // The last pass's first slice, while dA forms.
  k_pieces.Issue(grad, dw_chunk, c.rows, 1);
  k_pieces.Issue(rows, k_chunk, c.rows, 1);
  __pipeline_commit();
  // dT = tril(dT^T's transpose), stored as dT^T (the products read it transposed).
  dTt.Transform(
      [&](int r, int col, float v) { return col < c.rows && r <= col ? beta[r] * v : 0.0f; });
  dTt.StoreSplitBf16(dT, kLdSplit);
  __syncthreads();
  // Z = dT T^T = (dT_hi + dT_lo) T_hi^T + dT_hi T_lo^T (lo x lo left out, as in each product
  // of two split operands).
  Acc z;
  z.Zero();
  tile::MmaSplitBf16Acc64<false, false>(z, WYProductSteps::ZSteps(), dT, kLdSplit, kSplitLoStep, T,
                                        kLdSplit);
  tile::MmaBf16Acc64<false, false>(z, WYProductSteps::ZSteps(), dT, kLdSplit, T + kSplitLoStep,
                                   kLdSplit);
  z.StoreSplitBf16(Z, kLdSplit);
  __syncthreads();  // Z is in; dT is free
  IssueMat<kLd>(x, b.s.KD + Mat(p, chunk, h));
  __pipeline_commit();
  Acc dA;  // -T^T Z, strict_tril taken below
  dA.Zero();
  tile::MmaSplitBf16Acc64<false, true>(dA, WYProductSteps::DASteps(), T, kLdSplit, kSplitLoStep, Z,
                                       kLdSplit);
  tile::MmaBf16Acc64<false, true>(dA, WYProductSteps::DASteps(), T, kLdSplit, Z + kSplitLoStep,
                                  kLdSplit);
  __pipeline_wait_prior(0);
  __syncthreads();  // KD (and the first slice) are in; Z is free
  // t = dA * KD in dA's registers (KD is zero on and above the diagonal); dAb + dAb^T over Z
  // (split): the thread of a lower element writes it and its mirror (and the diagonal's zero), so
  // that every element is written once.
  const auto put_ab = [&](int r, int col, bf16 hi, bf16 lo) {
    dAb[r * kLdSplit + col] = hi;
    dAb[r * kLdSplit + col + kSplitLoStep] = lo;
  };
  dA.Transform([&](int r, int col, float v) {
    const bool lower = r < c.rows && col < r;
    const float da = lower ? -v : 0.0f;
    if (col < r) {
      const float ab = beta[r] * da * ptx::Exp2((G[r] - G[col]) * ptx::kRcpLn2);
      const bf16 hi = __float2bfloat16_rn(ab);
      const bf16 lo = __float2bfloat16_rn(ab - __bfloat162float(hi));
      put_ab(r, col, hi, lo);
      put_ab(col, r, hi, lo);
    } else if (col == r) {
      const bf16 zero = __float2bfloat16_rn(0.0f);
      put_ab(r, r, zero, zero);
    }
    return da * x[r * kLd + col];
  });
  // rowsum_i(t) from the registers, the first of the row parts that the K slices add gamma_i
  // k_i . dX_i to; (t^T beta)_i from the lane's columns (StoreColumnSumParts). (As t stored over
  // KD and summed by strided loads, it took a barrier of its own.)
  const Acc& t = dA;
  tile::StoreRowSumParts(
      x_parts, [&](int, int, int i, int e) { return t.part[i].x[e] + t.part[i].x[e + 1]; });
  {
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
  __syncthreads();  // dAb + dAb^T is in; KD is read
  for (int k0 = 0; k0 < p.k_dim; k0 += kBT) {
    if (k0 > 0) {
      k_pieces.Issue(grad, dw_chunk + k0, c.rows, 1);
      k_pieces.Issue(rows, k_chunk + k0, c.rows, 1);
    }
    __pipeline_commit();  // the slice (the first came while dA formed)
    // dk_r in a group of its own, waited for only after dX: with dk_r in the slice's group, the
    // wait here took 15% of the kernel's stall samples at (1, 8192, 96, 128) by ncu.
    IssueTokF32<kLd>(x, dk_rows + k0, k_stride, c.rows);
    __pipeline_commit();
    __pipeline_wait_prior(1);
    __syncthreads();                                          // the slice is in
    const Acc dx = t_times(grad, rows, x_parts, true, true);  // and gamma k . dX
    __pipeline_wait_prior(0);
    __syncthreads();  // dk_r is in
    // dk = dk_r + diag(beta gamma) dX + (dAb + dAb^T) K.
    Acc dk;
    dk.Load(x, kLd);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int r = Acc::ElementRow(i, e);
        dk.part[i].x[e] += beta[r] * gamma[r] * dx.part[i].x[e];
      }
    }
    tile::MmaSplitBf16Acc64<true, true>(dk, kBT, dAb, kLdSplit, kSplitLoStep, rows, kLdBf16);
    if (p.qk_l2norm) {
      StoreAccRows(dk, dk_rows + k0, k_stride, c.rows);
    } else {
      StoreAccRows(dk, p.dk + In(p.qk_strides, c.batch, c.t0, h) + k0, p.qk_strides.token, c.rows);
    }
    __syncthreads();  // grad, rows and x are free for the next slice
  }
  if (threadIdx.x < c.rows) {
    const int r = threadIdx.x;
    const float x_sum = tile::RowSum(x_parts, r);  // rowsum_r(t) + gamma_r k_r . dX_r
    const float* parts = dG_parts + r;
    float dG = beta[r] * x_sum - (t_col_parts[r] + t_col_parts[kBT + r]);
    for (int s = 0; s < p.k_dim / kBT; ++s) dG += parts[s * kBT];
    b.s.dG[Tok(p, c.row + r, h, 1)] = dG;
    const float dbeta = x_sum + tile::RowSum(vdy_parts, r);
    p.dbeta[In(p.scalar_strides, c.batch, c.t0 + r, h)] =
        p.beta_sigmoid ? dbeta * beta[r] * (1.0f - beta[r]) : dbeta;
  }
}

inline size_t WYBackwardSmem() {
  return (2 * kTile + kBT * kLdT + (5 + 2 * tile::kAcc64ColumnTiles + kMaxKSlices) * kBT) *
             sizeof(float) +
         2 * kBf16Tile * sizeof(bf16);
}

}  // namespace flame::kernels::delta_chunk::tiles
