#include "kernels/gla/chunk_gla_reference.h"

namespace flame::kernels {

void GlaReferenceForward(const RecurrenceShape& shape, float scale, const float* q, const float* k,
                         const float* v, const float* g, const float* initial_state, float* o,
                         float* final_state) {
  GatedRecurrenceForward<float>(shape, scale, q, k, v, g, initial_state, o, final_state);
}

void GlaReferenceBackward(const RecurrenceShape& shape, float scale, const float* q,
                          const float* k, const float* v, const float* g,
                          const float* initial_state, const float* d_o,
                          const float* d_final_state, float* dq, float* dk, float* dv, float* dg,
                          float* d_initial_state) {
  GatedRecurrenceBackward<float>(shape, scale, q, k, v, g, initial_state, d_o, d_final_state, dq,
                                 dk, dv, dg, d_initial_state);
}

}  // namespace flame::kernels
