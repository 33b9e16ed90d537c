#include "kernels/simple_gla/chunk_simple_gla_reference.h"

#include <cstddef>
#include <vector>

namespace flame::kernels {
namespace {

// [B,T,H] -> [B,T,H,K] by repeating each gate over the key channels.
std::vector<float> Broadcast(const RecurrenceShape& shape, const float* g) {
  const size_t rows = static_cast<size_t>(shape.batch) * shape.seq_len * shape.heads;
  std::vector<float> out(rows * shape.k_dim);
  for (size_t r = 0; r < rows; ++r) {
    for (int c = 0; c < shape.k_dim; ++c) out[r * shape.k_dim + c] = g[r];
  }
  return out;
}

}  // namespace

void SimpleGlaReferenceForward(const RecurrenceShape& shape, float scale, const float* q,
                               const float* k, const float* v, const float* g,
                               const float* initial_state, float* o, float* final_state) {
  const std::vector<float> gk = Broadcast(shape, g);
  GatedRecurrenceForward<float>(shape, scale, q, k, v, gk.data(), initial_state, o, final_state);
}

void SimpleGlaReferenceBackward(const RecurrenceShape& shape, float scale, const float* q,
                                const float* k, const float* v, const float* g,
                                const float* initial_state, const float* d_o,
                                const float* d_final_state, float* dq, float* dk, float* dv,
                                float* dg, float* d_initial_state) {
  const std::vector<float> gk = Broadcast(shape, g);
  std::vector<float> dgk(gk.size());
  GatedRecurrenceBackward<float>(shape, scale, q, k, v, gk.data(), initial_state, d_o,
                                 d_final_state, dq, dk, dv, dgk.data(), d_initial_state);
  const size_t rows = gk.size() / shape.k_dim;
  for (size_t r = 0; r < rows; ++r) {
    float acc = 0;
    for (int c = 0; c < shape.k_dim; ++c) acc += dgk[r * shape.k_dim + c];
    dg[r] = acc;
  }
}

}  // namespace flame::kernels
