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
// Each V step copies its five tiles with cp.async, all in flight at once: the state pass stores
// S, dS', Ut and dUt as TF32 values, so they land as operand tiles untouched; dO comes as bf16
// and is widened in shared memory while the products that do not read it run. (Loaded through
// registers, one tile after another, the step waited on five round trips to memory.) The
// products accumulate in registers over V, so shared memory holds only the step's tiles: two
// blocks per multiprocessor.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_copies.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Five fp32 tiles (s, ds, dut, ut, d_o; leading dimension kLd) and dO's bf16 copy.
inline size_t RowTermsSmem() { return 5 * kTile * sizeof(float) + kBf16Tile * 2; }

__global__ void __launch_bounds__(kThreads, 2) RowTermsKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  float* s = reinterpret_cast<float*>(smem4);
  float* ds = s + kTile;
  float* dut = ds + kTile;
  float* ut = dut + kTile;
  float* d_o = ut + kTile;
  bf16* d_o_in = reinterpret_cast<bf16*>(d_o + kTile);
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT;
  const int chunk = blockIdx.x / nk, slice = blockIdx.x % nk, k0 = slice * kBT, h = blockIdx.y;
  const bool first_slice = slice == 0;
  const Chunk c = LocateChunk(p, chunk);
  const float* S = b.s.S + State(p, chunk, h) + int64_t{k0} * V;
  const float* dS = b.s.dS + State(p, chunk, h) + int64_t{k0} * V;
  const float* dut_chunk = TokPtr(b.s.dUt, p, c, 0, h, V);
  const float* ut_chunk = TokPtr(b.s.Ut, p, c, 0, h, V);
  const int64_t tok_stride = int64_t{p.heads} * V;
  const bf16* d_o_chunk = p.d_o + In(p.v_strides, c.batch, c.t0, h);
  const TokTilePieces d_o_pieces(p.v_strides.token);
  float state_dot = 0.0f;
  Acc dw, dkd, sdo, dm;
  dw.Zero(), dkd.Zero(), sdo.Zero(), dm.Zero();
  for (int v0 = 0; v0 < V; v0 += kBT) {
    // The tiles' earlier readers are behind the barrier that ended the previous step.
    IssueMat<kLd>(s, S + v0, V);
    IssueMat<kLd>(ds, dS + v0, V);
    IssueTokF32<kLd>(dut, dut_chunk + v0, tok_stride, c.rows);
    IssueTokF32<kLd>(ut, ut_chunk + v0, tok_stride, c.rows);
    d_o_pieces.Issue(d_o_in, d_o_chunk + v0, c.rows, 1);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kBT * kBT / 2; idx += kThreads) {
      const int r = idx / (kBT / 2), c2 = idx % (kBT / 2) * 2;
      *reinterpret_cast<float2*>(d_o + r * kLd + c2) =
          __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(d_o_in + r * kLdBf16 + c2));
    }
    Mma<false, true>(dw, dut, s);
    Mma<false, true>(dkd, ut, ds);
    for (int e = threadIdx.x; e < kBT * kBT; e += kThreads) {
      state_dot += s[e / kBT * kLd + e % kBT] * ds[e / kBT * kLd + e % kBT];
    }
    __syncthreads();  // d_o is in
    Mma<false, true>(sdo, d_o, s);
    if (first_slice) Mma<false, true>(dm, d_o, ut);
    __syncthreads();
  }
  // Staged through the (now free) input tiles: StoreTok writes only the chunk's rows. dW is read
  // only as an operand (WYBackward copies it into an operand tile as it is): TF32 values.
  dw.Scale(-1.0f);
  dw.Store<true>(s, kLd);
  dkd.Store(ds, kLd);
  sdo.Store(dut, kLd);
  if (first_slice) dm.Store(ut, kLd);
  for (int off = 16; off > 0; off /= 2) state_dot += __shfl_xor_sync(0xffffffffu, state_dot, off);
  float* warp_dots = d_o;
  if (threadIdx.x % 32 == 0) warp_dots[threadIdx.x / 32] = state_dot;
  __syncthreads();
  StoreTok(b.s.dW, s, p, c, h, K, k0);
  StoreTok(b.s.dKd, ds, p, c, h, K, k0);
  StoreTok(b.s.SdO, dut, p, c, h, K, k0);
  if (first_slice) {
    float* dM = b.s.dM + Mat(p, chunk, h);
    for (int e = threadIdx.x; e < kBT * kBT; e += kThreads) {
      const int i = e / kBT, j = e % kBT;
      dM[e] = i < c.rows && j <= i ? p.scale * ut[i * kLd + j] : 0.0f;
    }
  }
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_dots[w];
    b.s.state_dots[(int64_t{chunk} * p.heads + h) * kMaxKSlices + slice] = total;
  }
}

}  // namespace flame::kernels::delta_chunk::tiles
