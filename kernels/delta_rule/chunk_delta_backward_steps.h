// The scalar backward step of the gated delta rule after GateGradsKernel
// (chunk_delta_gate_scans.cuh) has left the chunks' sums of dg g and da in scratch:
//   HeadGrads   dA_log = sum dg g, ddt_bias = sum da over the head's chunks
#pragma once

#include "kernels/delta_rule/chunk_delta_steps.h"

namespace flame::kernels::delta_chunk {

// Unit = head, gate_in_kernel only: dA_log = sum dg g and ddt_bias = sum da over every token of
// the head, from GateGradsKernel's per-chunk sums in chunk order (deterministic, no atomics).
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
