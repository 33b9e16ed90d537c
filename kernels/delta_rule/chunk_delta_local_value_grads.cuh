// The chunk-local part of the new values' gradient in the chunked delta rule (formulas in
// chunk_delta_steps.h), one block per (chunk, 64-wide V slice, head):
//   MtdO = scale M^T dO   (fp32, [R,H,V])
// which the mma.sync backward state pass adds to diag(exp(G_L - G)) K dS' chunk by chunk (the
// column pass forms it itself, and so does the mma.sync pass's variant for one-wave grids).
// Here, for all chunks at once, it leaves the sequential pass one product fewer per chunk, and M
// and an fp32 dO tile out of its shared memory: two blocks per multiprocessor at K = 128 instead
// of one.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// M and the dO tile, bf16 (leading dimension kLdBf16; M read transposed by ldmatrix).
inline size_t LocalValueGradsSmem() { return 2 * kBf16Tile * sizeof(bf16); }

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
  tile::MmaBf16Acc64<false, true>(acc, kBT, M, kLdBf16, d_o, kLdBf16);
  acc.Scale(p.scale);
  StoreAccRows(acc, TokPtr(b.s.MtdO, p, c, 0, h, p.v_dim) + v0, int64_t{p.heads} * p.v_dim, c.rows);
}

}  // namespace flame::kernels::delta_chunk::tiles
