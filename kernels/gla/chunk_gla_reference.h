// fp32 CPU reference for chunk_gla: the naive recurrence (kernels/common). Contiguous tensors:
// q, k, g, dq, dk, dg [B,T,H,K]; v, o, d_o, dv [B,T,H,V]; states [N,H,K,V] (may be null).
#pragma once

#include "kernels/common/gated_recurrence_reference.h"

namespace flame::kernels {

void GlaReferenceForward(const RecurrenceShape& shape, float scale, const float* q, const float* k,
                         const float* v, const float* g, const float* initial_state, float* o,
                         float* final_state);

void GlaReferenceBackward(const RecurrenceShape& shape, float scale, const float* q,
                          const float* k, const float* v, const float* g,
                          const float* initial_state, const float* d_o,
                          const float* d_final_state, float* dq, float* dk, float* dv, float* dg,
                          float* d_initial_state);

}  // namespace flame::kernels
