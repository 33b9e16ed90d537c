// The output of the chunked delta rule, one block per (chunk, 64-wide V slice, head), the slices
// of a chunk adjacent in blockIdx.x:
//   o = scale [diag(gamma) (Q S) + M Ut]
// with S the state entering the chunk (formulas in chunk_delta_steps.h).
//
// Every operand reaches shared memory by cp.async, with no pass through registers and no
// conversion: the bf16 queries and chunk states (Q S is a bf16 product; the state pass stores
// the bf16 copy of S it multiplies itself), the bf16 Ut and M (ChunkPrepare stores M in bf16, so
// M Ut is a bf16 product too). The row factor gamma and the scale apply to the accumulators, not
// to the operands. The queries and states go through two stages of 64-wide K slices (at K <= 128
// every slice is in flight at once); M, Ut and G arrive with the first stage.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Shared memory, in this order: two stages of a bf16 query tile and a bf16 state slice (leading
// dimension kLdBf16), M and Ut (bf16, kLdBf16), G.
constexpr int kOutputQueryBytes = kBf16Tile * 2;
constexpr int kOutputStateBytes = kBf16Tile * 2;

inline size_t OutputSmem() {
  return 2 * (kOutputQueryBytes + kOutputStateBytes) + 2 * kBf16Tile * 2 + kBT * 4;
}

__global__ void __launch_bounds__(kThreads, 2) OutputKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT;
  char* at = reinterpret_cast<char*>(smem4);
  bf16* q_stages = reinterpret_cast<bf16*>(at);
  bf16* s_stages = reinterpret_cast<bf16*>(at + 2 * kOutputQueryBytes);
  bf16* M = reinterpret_cast<bf16*>(at + 2 * (kOutputQueryBytes + kOutputStateBytes));
  bf16* ut = M + kBf16Tile;
  float* G = reinterpret_cast<float*>(ut + kBf16Tile);
  // A chunk's V slices are adjacent blocks: its queries and M come from L2 after the first.
  const int nv = V / kBT, chunk = blockIdx.x / nv, h = blockIdx.y, v0 = blockIdx.x % nv * kBT;
  const Chunk c = LocateChunk(p, chunk);
  const TokTilePieces query_pieces(int64_t{p.heads} * K), state_pieces(V),
      ut_pieces(int64_t{p.heads} * V);
  const bf16* q_chunk = TokPtr(b.s.qn, p, c, 0, h, K);
  const bf16* s_chunk = b.s.S + State(p, chunk, h) + v0;
  // K slice j into stage j % 2.
  const auto issue_slice = [&](int j) {
    query_pieces.Issue(q_stages + j % 2 * kBf16Tile, q_chunk + j * kBT, c.rows, 1);
    state_pieces.Issue(s_stages + j % 2 * kBf16Tile, s_chunk + int64_t{j} * kBT * V, kBT, 1);
  };
  issue_slice(0);
  TokTilePieces(kBT).Issue(M, b.s.M + Mat(p, chunk, h), kBT, 1);
  ut_pieces.Issue(ut, TokPtr(b.s.Ut, p, c, 0, h, V) + v0, c.rows, 1);
  IssueRowScalars(G, nullptr, b.s.G + Tok(p, c.row, h, 1), nullptr, p.heads, c.rows);
  __pipeline_commit();
  if (nk > 1) issue_slice(1);
  __pipeline_commit();
  Acc acc;  // Q S, then o
  acc.Zero();
  for (int j = 0; j < nk; ++j) {
    __pipeline_wait_prior(1);  // slice j (and with it, for j = 0, M, Ut and G)
    __syncthreads();
    tile::MmaBf16Acc64<true, true>(acc, kBT, q_stages + j % 2 * kBf16Tile, kLdBf16,
                                   s_stages + j % 2 * kBf16Tile, kLdBf16);
    if (j + 2 < nk) {
      __syncthreads();  // stage j % 2 is read
      issue_slice(j + 2);
    }
    __pipeline_commit();
  }
  acc.Transform([&](int r, int, float x) { return x * __expf(G[r]); });
  tile::MmaBf16Acc64<true, true>(acc, kBT, M, kLdBf16, ut, kLdBf16);
  acc.Scale(p.scale);
  // Out through the first query stage, in 16-byte row pieces.
  __syncthreads();
  acc.StoreBf16(q_stages, kLdBf16);
  __syncthreads();
  StoreTokTile(p.o + In(p.v_strides, c.batch, c.t0, h) + v0, p.v_strides.token, q_stages, c.rows);
}

}  // namespace flame::kernels::delta_chunk::tiles
