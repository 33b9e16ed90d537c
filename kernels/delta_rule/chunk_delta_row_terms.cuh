// The backward's row terms of the chunked delta rule, per (chunk, head), with S and dS' the
// chunk's entering state and leaving-state gradient (formulas in chunk_delta_steps.h):
//   dW = -dUt S^T,  dKd = Ut dS'^T,  SdO = dO S^T  (64 x K),  dM = scale tril(dO Ut^T),
//   and <S, dS'> (RowGrads' last row).
// One block per (chunk, 64-wide K slice, head), the slices of a chunk adjacent in blockIdx.x: a
// block loops over V for its slice only, and the chunk's dUt, Ut and dO tiles, which every slice
// reads, come from L2 for all but the first of the neighbouring blocks (one block looping over
// all K slices re-read them per slice; at (8, 4096, 8, 256) the split took the kernel from 3.53
// to 3.01 ms per call on the H200). The first slice's block also computes dM; each block leaves
// its part of <S, dS'>.
//
// Each V step copies its five bf16 tiles with cp.async, all in flight at once: the chunk states
// S and dS' (the state passes' copies), dO, Ut and dUt, and every product is a bf16 product. dW
// and dKd are formed transposed (S dUt^T, dS' Ut^T) as the earlier bf16 x TF32 products needed
// and kept so: the A side is the state slice either way. (Loaded through registers, one tile after
// another, the step waited on five round trips to memory.) The products accumulate in registers
// over V, so shared memory holds only the step's tiles, and after the loop the four results' fp32
// staging.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// The V step's five bf16 tiles (s, ds, d_o, ut, dut; leading dimension kLdBf16), carved from the
// space of the four fp32 64 x 64 tiles (kLd) that stage the results after the loop; then the
// warps' parts of <S, dS'>.
static_assert(5 * kBf16Tile * 2 <= 4 * kTile * 4, "the step's tiles fit in the results' staging");
inline size_t RowTermsSmem() { return 4 * kTile * sizeof(float) + kWarps * sizeof(float); }

__global__ void __launch_bounds__(kThreads, 2) RowTermsKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  char* at = reinterpret_cast<char*>(smem4);
  bf16* s = reinterpret_cast<bf16*>(at);
  bf16* ds = s + kBf16Tile;
  bf16* d_o = ds + kBf16Tile;
  bf16* ut = d_o + kBf16Tile;
  bf16* dut = ut + kBf16Tile;
  float* staged = reinterpret_cast<float*>(smem4);  // after the loop: dW, dKd, SdO, dM rows
  float* warp_dots = staged + 4 * kTile;
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT;
  const int chunk = blockIdx.x / nk, slice = blockIdx.x % nk, k0 = slice * kBT, h = blockIdx.y;
  const bool first_slice = slice == 0;
  const Chunk c = LocateChunk(p, chunk);
  const bf16* S = b.s.S + State(p, chunk, h) + int64_t{k0} * V;
  const bf16* dS = b.s.dS + State(p, chunk, h) + int64_t{k0} * V;
  const bf16* dut_chunk = TokPtr(b.s.dUt, p, c, 0, h, V);
  const bf16* ut_chunk = TokPtr(b.s.Ut, p, c, 0, h, V);
  const int64_t tok_stride = int64_t{p.heads} * V;
  const bf16* d_o_chunk = p.d_o + In(p.v_strides, c.batch, c.t0, h);
  // ut_pieces: the rows of Ut and of dUt.
  const TokTilePieces d_o_pieces(p.v_strides.token), state_pieces(V), ut_pieces(tok_stride);
  float state_dot = 0.0f;
  Acc dw_t, dkd_t, sdo, dm;  // -dW^T, dKd^T (K slice x chunk rows), SdO, dM / scale
  dw_t.Zero(), dkd_t.Zero(), sdo.Zero(), dm.Zero();
  for (int v0 = 0; v0 < V; v0 += kBT) {
    // The tiles' earlier readers are behind the barrier that ended the previous step.
    state_pieces.Issue(s, S + v0, kBT, 1);
    state_pieces.Issue(ds, dS + v0, kBT, 1);
    ut_pieces.Issue(dut, dut_chunk + v0, c.rows, 1);
    ut_pieces.Issue(ut, ut_chunk + v0, c.rows, 1);
    d_o_pieces.Issue(d_o, d_o_chunk + v0, c.rows, 1);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    tile::MmaBf16Acc64<true, false>(dw_t, kBT, s, kLdBf16, dut, kLdBf16);
    tile::MmaBf16Acc64<true, false>(dkd_t, kBT, ds, kLdBf16, ut, kLdBf16);
    tile::MmaBf16Acc64<true, false>(sdo, kBT, d_o, kLdBf16, s, kLdBf16);
    if (first_slice) tile::MmaBf16Acc64<true, false>(dm, kBT, d_o, kLdBf16, ut, kLdBf16);
    ForBlockItems<kThreads, kBT * kBT / 2>([&](int idx) {
      const int at2 = idx / (kBT / 2) * kLdBf16 + idx % (kBT / 2) * 2;
      const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(s + at2));
      const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(ds + at2));
      state_dot += x.x * y.x + x.y * y.y;
    });
    __syncthreads();
  }
  // Staged as rows: StoreTok writes only the chunk's rows (dW in bf16, WYBackward's operand).
  dw_t.Scale(-1.0f);
  dw_t.StoreTransposed(staged, kLd);
  dkd_t.StoreTransposed(staged + kTile, kLd);
  sdo.Store(staged + 2 * kTile, kLd);
  if (first_slice) dm.Store(staged + 3 * kTile, kLd);
  for (int off = 16; off > 0; off /= 2) state_dot += __shfl_xor_sync(0xffffffffu, state_dot, off);
  if (threadIdx.x % 32 == 0) warp_dots[threadIdx.x / 32] = state_dot;
  __syncthreads();
  StoreTok(b.s.dW, staged, p, c, h, K, k0);
  StoreTok(b.s.dKd, staged + kTile, p, c, h, K, k0);
  StoreTok(b.s.SdO, staged + 2 * kTile, p, c, h, K, k0);
  if (first_slice) {
    const float* dm_rows = staged + 3 * kTile;
    float* dM = b.s.dM + Mat(p, chunk, h);
    ForBlockItems<kThreads, kBT * kBT>([&](int e) {
      const int i = e / kBT, j = e % kBT;
      dM[e] = i < c.rows && j <= i ? p.scale * dm_rows[i * kLd + j] : 0.0f;
    });
  }
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_dots[w];
    b.s.state_dots[(int64_t{chunk} * p.heads + h) * kMaxKSlices + slice] = total;
  }
}

}  // namespace flame::kernels::delta_chunk::tiles
