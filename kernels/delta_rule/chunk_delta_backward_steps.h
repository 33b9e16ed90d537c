// The scalar backward steps of the gated delta rule, after the tile kernels (chunk_delta_tiles.cuh)
// have left dG, the gradient of the chunk-local cumsum G, in scratch:
//   GateGrads   dg = reverse chunk-local cumsum of dG; da through the in-kernel gate; the
//               chunk's sums of dg g and da
//   HeadGrads   dA_log = sum dg g, ddt_bias = sum da over the head's chunks
#pragma once

#include "kernels/delta_rule/chunk_delta_steps.h"

namespace flame::kernels::delta_chunk {

// Unit = (chunk, head), gated only: dg = reverse chunk-local cumsum of dG (G_i = sum_{t<=i} g_t),
// then da = dg, or dg * -exp(A_log) softplus'(a + dt_bias) with the in-kernel gate.
struct GateGrads : StepBase {
  FLAME_HD int64_t Units() const { return int64_t{TotalChunks(p)} * p.heads; }
  FLAME_HD void operator()(int64_t u) const {
    const int h = static_cast<int>(u % p.heads);
    const Chunk c = LocateChunk(p, static_cast<int>(u / p.heads));
    float acc = 0.0f, sum_dg_g = 0.0f, sum_da = 0.0f;
    for (int i = c.rows - 1; i >= 0; --i) {
      const int64_t ri = (c.row + i) * p.heads + h;
      acc += s.dG[ri];  // dg of row i
      const int64_t si = In(p.scalar_strides, c.batch, c.t0 + i, h);
      float da = acc;
      if (p.gate_in_kernel) {
        const float x = p.a[si] + p.dt_bias[h];
        da = -acc * expf(p.A_log[h]) * (x > kSoftplusThreshold ? 1.0f : Sigmoid(x));
      }
      p.da[si] = da;
      sum_dg_g += acc * s.g[ri];
      sum_da += da;
    }
    s.gate_sums[u * 2] = sum_dg_g;
    s.gate_sums[u * 2 + 1] = sum_da;
  }
};

// Unit = head, gate_in_kernel only: dA_log = sum dg g and ddt_bias = sum da over every token of
// the head, from GateGrads' per-chunk sums in chunk order (deterministic, no atomics).
struct HeadGrads : StepBase {
  FLAME_HD int64_t Units() const { return p.heads; }
  FLAME_HD void operator()(int64_t u) const {
    const int h = static_cast<int>(u);
    float d_alog = 0.0f, d_dt = 0.0f;
    for (int chunk = 0; chunk < TotalChunks(p); ++chunk) {
      const int64_t x = (int64_t{chunk} * p.heads + h) * 2;
      d_alog += s.gate_sums[x];
      d_dt += s.gate_sums[x + 1];
    }
    if (p.dA_log) p.dA_log[h] = d_alog;
    if (p.ddt_bias) p.ddt_bias[h] = d_dt;
  }
};

}  // namespace flame::kernels::delta_chunk
