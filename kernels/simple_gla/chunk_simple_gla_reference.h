// fp32 CPU reference for chunk_simple_gla: the naive recurrence with the per-head gate broadcast
// over the key channels. Contiguous tensors: q, k, dq, dk [B,T,H,K]; v, o, d_o, dv [B,T,H,V];
// g, dg [B,T,H]; states [N,H,K,V] (may be null). For RetNet's constant decay pass g filled with
// g_gamma[h].
#pragma once

#include "kernels/common/gated_recurrence_reference.h"

namespace flame::kernels {

void SimpleGlaReferenceForward(const RecurrenceShape& shape, float scale, const float* q,
                               const float* k, const float* v, const float* g,
                               const float* initial_state, float* o, float* final_state);

// dg is the per-head gate gradient (the sum over K of the per-channel one).
void SimpleGlaReferenceBackward(const RecurrenceShape& shape, float scale, const float* q,
                                const float* k, const float* v, const float* g,
                                const float* initial_state, const float* d_o,
                                const float* d_final_state, float* dq, float* dk, float* dv,
                                float* dg, float* d_initial_state);

}  // namespace flame::kernels
