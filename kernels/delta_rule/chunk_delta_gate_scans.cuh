// The chunk-local scans of the gated rule's gate, one warp per (chunk, head) (ungated, G = 0 is
// written with the row scalars and neither runs): the forward's cumsum
//   G_i = sum_{t <= i} g_t
// and the backward's reverse cumsum of dG, the gradient of G,
//   dg_i = sum_{t >= i} dG_t,  da_i = dg_i, or dg_i (-exp(A_log)) softplus'(a_i + dt_bias) with
//   the in-kernel gate,
// with the chunk's sums of dg g and of da (HeadGrads' inputs, chunk_delta_backward_steps.h).
// Lane l holds rows 2l and 2l + 1; a warp scan over the lanes' pair sums takes five shuffle steps.
// (A thread per (chunk, head) walking its 64 rows, each row's load waiting on the last, took about
// the same time at every shape: on the H200 at (8, 2048, 16, 128) the cumsum 29.0 -> 7.5 us per
// call, the backward's 36.2 -> 8.4; the cumsum runs in the forward and again in the backward.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/block_items.cuh"
#include "kernels/delta_rule/chunk_delta_steps.h"

namespace flame::kernels::delta_chunk {

constexpr int kScanThreads = 128;

// The warp's (chunk, head) unit: its index, head and chunk; the lane holds the chunk's rows
// i0 = 2 lane and i0 + 1.
struct ScanUnit {
  int64_t unit;
  int h, i0;
  Chunk c;
  int64_t heads;

  // Whether the lane's row i0 + j (j = 0, 1) is in the chunk, and its index in [R,H] scratch.
  __device__ bool Has(int j) const { return i0 + j < c.rows; }
  __device__ int64_t At(int j) const { return (c.row + i0 + j) * heads + h; }
};

// False past the last unit (whole warps leave together).
__device__ inline bool LocateScanUnit(const ChunkDeltaParams& p, ScanUnit* s) {
  s->unit = (int64_t{blockIdx.x} * kScanThreads + threadIdx.x) / 32;
  if (s->unit >= int64_t{p.total_chunks} * p.heads) return false;
  s->h = static_cast<int>(s->unit % p.heads);
  s->i0 = threadIdx.x % 32 * 2;
  s->c = LocateChunk(p, static_cast<int>(s->unit / p.heads));
  s->heads = p.heads;
  return true;
}

// Sum of x over lanes [0, lane] (kSuffix: over [lane, 31]).
template <bool kSuffix>
__device__ inline float WarpInclusiveSum(float x) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const float y =
        kSuffix ? __shfl_down_sync(0xffffffffu, x, off) : __shfl_up_sync(0xffffffffu, x, off);
    if (kSuffix ? lane + off < 32 : lane >= off) x += y;
  }
  return x;
}

__global__ void __launch_bounds__(kScanThreads) GateCumsumKernel(StepBase b) {
  ScanUnit u;
  if (!LocateScanUnit(b.p, &u)) return;
  const float g0 = u.Has(0) ? b.s.g[u.At(0)] : 0.0f, g1 = u.Has(1) ? b.s.g[u.At(1)] : 0.0f;
  const float through = WarpInclusiveSum<false>(g0 + g1);
  float before = __shfl_up_sync(0xffffffffu, through, 1);
  if (u.i0 == 0) before = 0.0f;
  const float G0 = before + g0;
  if (u.Has(0)) b.s.G[u.At(0)] = G0;
  if (u.Has(1)) b.s.G[u.At(1)] = G0 + g1;
}

// Gated only: dg, da (p.da) and the chunk's sums (s.gate_sums).
__global__ void __launch_bounds__(kScanThreads) GateGradsKernel(StepBase b) {
  const ChunkDeltaParams& p = b.p;
  ScanUnit u;
  if (!LocateScanUnit(p, &u)) return;
  const float growth = p.gate_in_kernel ? -expf(p.A_log[u.h]) : 0.0f;  // da = dg * growth * sp'
  float dG[2], dg[2];
  for (int j = 0; j < 2; ++j) dG[j] = u.Has(j) ? b.s.dG[u.At(j)] : 0.0f;
  const float from = WarpInclusiveSum<true>(dG[0] + dG[1]);
  float after = __shfl_down_sync(0xffffffffu, from, 1);
  if (u.i0 == 62) after = 0.0f;
  dg[1] = after + dG[1];
  dg[0] = dg[1] + dG[0];
  float sum_dg_g = 0.0f, sum_da = 0.0f;
  for (int j = 0; j < 2; ++j) {
    if (!u.Has(j)) continue;
    const int64_t si = In(p.scalar_strides, u.c.batch, u.c.t0 + u.i0 + j, u.h);
    float da = dg[j];
    if (p.gate_in_kernel) {
      const float x = p.a[si] + p.dt_bias[u.h];
      da = dg[j] * growth * (x > kSoftplusThreshold ? 1.0f : Sigmoid(x));
    }
    p.da[si] = da;
    sum_dg_g += dg[j] * b.s.g[u.At(j)];
    sum_da += da;
  }
  sum_dg_g = WarpSum(sum_dg_g);
  sum_da = WarpSum(sum_da);
  if (u.i0 == 0) {
    b.s.gate_sums[u.unit * 2] = sum_dg_g;
    b.s.gate_sums[u.unit * 2 + 1] = sum_da;
  }
}

}  // namespace flame::kernels::delta_chunk
