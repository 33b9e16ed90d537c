// fp32 CPU reference for gated linear attention: the naive token-by-token recurrence, forward and
// backward (a reverse pass over time). Every gated chunk kernel (chunk_gla, chunk_simple_gla) is
// tested against it. Plain C++; a double instantiation exists for finite-difference tests.
//
//   S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,   o_t = scale * S_t^T q_t
//
// All tensors are contiguous: q, k, g, dq, dk, dg [B,T,H,K]; v, o, d_o, dv [B,T,H,V];
// states [N,H,K,V]. The gate here is always per channel; scalar gates are broadcast by the caller.
#pragma once

#include <cstdint>
#include <vector>

namespace flame::kernels {

struct RecurrenceShape {
  int batch = 0, seq_len = 0, heads = 0, k_dim = 0, v_dim = 0;
  std::vector<int32_t> cu_seqlens;  // empty: N = batch sequences of seq_len; else batch must be 1
  int NumSeqs() const { return cu_seqlens.empty() ? batch : static_cast<int>(cu_seqlens.size()) - 1; }
};

// initial_state and final_state may be null.
template <typename Real>
void GatedRecurrenceForward(const RecurrenceShape& shape, Real scale, const Real* q, const Real* k,
                            const Real* v, const Real* g, const Real* initial_state, Real* o,
                            Real* final_state);

// d_final_state and initial_state may be null (zero); d_initial_state may be null.
template <typename Real>
void GatedRecurrenceBackward(const RecurrenceShape& shape, Real scale, const Real* q,
                             const Real* k, const Real* v, const Real* g,
                             const Real* initial_state, const Real* d_o,
                             const Real* d_final_state, Real* dq, Real* dk, Real* dv, Real* dg,
                             Real* d_initial_state);

}  // namespace flame::kernels
