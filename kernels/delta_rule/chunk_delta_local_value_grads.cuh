// The chunk-local part of the new values' gradient in the chunked delta rule (formulas in
// chunk_delta_steps.h), one block per (chunk, 64-wide V slice, head):
//   MtdO = scale M^T dO   (fp32: [R,H,V] rows for the mma.sync backward pass; for the column
//                          pass, in its lanes' order, MtdOFragments)
// which the backward state pass adds to diag(exp(G_L - G)) K dS' chunk by chunk. Here, for all
// chunks at once, it leaves the sequential pass one product fewer per chunk, and M and an fp32 dO
// tile out of its shared memory: two blocks per multiprocessor at K = 128 instead of one.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_columns.cuh"
#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// M and the dO tile, bf16 (leading dimension kLdBf16; M read transposed by ldmatrix).
inline size_t LocalValueGradsSmem() { return 2 * kBf16Tile * sizeof(bf16); }

template <bool kColumnOrder>
__global__ void __launch_bounds__(kThreads, 3) LocalValueGradsKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  bf16* M = reinterpret_cast<bf16*>(smem4);
  bf16* d_o = M + kBf16Tile;
  const ChunkDeltaParams& p = b.p;
  // A chunk's V slices are adjacent blocks: its M comes from L2 after the first.
  const int nv = p.v_dim / kBT, chunk = blockIdx.x / nv, h = blockIdx.y, v0 = blockIdx.x % nv * kBT;
  const Chunk c = LocateChunk(p, chunk);
  TokTilePieces(kBT).Issue(M, b.s.M + Mat(p, chunk, h), kBT, 1);
  TokTilePieces(p.v_strides.token)
      .Issue(d_o, p.d_o + In(p.v_strides, c.batch, c.t0, h) + v0, c.rows, 1);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  Acc acc;
  acc.Zero();
  if (!kColumnOrder) {
    tile::MmaBf16Acc64<false, true>(acc, kBT, M, kLdBf16, d_o, kLdBf16);
    acc.Scale(p.scale);
    StoreAccRows(acc, TokPtr(b.s.MtdO, p, c, 0, h, p.v_dim) + v0, int64_t{p.heads} * p.v_dim,
                 c.rows);
    return;
  }
  // MtdO^T = scale dO^T M (values x tokens): warp w's part i holds the transpose of column block
  // w / 4 + 2 i of the slice, tokens 16 (w % 4) .. + 15 -- n8 tiles 2 (w % 4) + half, each the
  // lanes' accumulator places of the column pass (Acc64's x[4 half .. 4 half + 3]).
  tile::MmaBf16Acc64<false, true>(acc, kBT, d_o, kLdBf16, M, kLdBf16);
  acc.Scale(p.scale);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* dst = b.s.MtdO + MtdOFragments::At(p, chunk, h, v0 / 16 + warp / 4) +
               4 * (32 * 2 * (warp % 4) + lane);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float* x = acc.part[i].x + 4 * half;
      *reinterpret_cast<float4*>(dst + 2 * i * MtdOFragments::kBlockFloats + 4 * 32 * half) =
          make_float4(x[0], x[1], x[2], x[3]);
    }
  }
}

}  // namespace flame::kernels::delta_chunk::tiles
