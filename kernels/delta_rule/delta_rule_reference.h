// fp32 CPU reference for the delta-rule family (chunk_delta_rule, chunk_gated_delta_rule): the
// naive token-by-token recurrence, forward and an exact backward (a reverse pass over the
// recurrence). Every delta-rule kernel is tested against it. Plain C++; the templates are
// instantiated for float (the GPU tests' reference) and double (the finite-difference tests).
//
// Recurrence per sequence and head (S is K x V; alpha_t = exp(g_t), alpha = 1 without a gate):
//   S'_t = alpha_t S_{t-1}
//   S_t  = S'_t + beta_t k_t (v_t - S'_t^T k_t)^T      = alpha_t (I - beta_t k k^T) S_{t-1} +
//   beta_t k v^T o_t  = scale * S_t^T q_t
// Contiguous tensors: q, k, dq, dk [B,T,H,K]; v, o, d_o, dv [B,T,H,V]; beta, g, dbeta, dg [B,T,H];
// states [N,H,K,V] (flame's K-major state; fla's layers ask for the V-major transpose).
#pragma once

#include <cstdint>

#include "kernels/common/gated_recurrence_reference.h"

namespace flame::kernels {

// L2 norm eps (inside the sqrt), as in fla's use_qk_l2norm_in_kernel.
constexpr double kDeltaL2NormEps = 1e-6;

// The bare recurrence. g (natural-log decay per head and token) may be null: no decay.
// initial_state and final_state may be null.
template <typename Real>
void DeltaRecurrenceForward(const RecurrenceShape& shape, Real scale, const Real* q, const Real* k,
                            const Real* v, const Real* beta, const Real* g,
                            const Real* initial_state, Real* o, Real* final_state);

// d_final_state and initial_state may be null (zero); dg must be null exactly when g is;
// d_initial_state may be null.
template <typename Real>
void DeltaRecurrenceBackward(const RecurrenceShape& shape, Real scale, const Real* q, const Real* k,
                             const Real* v, const Real* beta, const Real* g,
                             const Real* initial_state, const Real* d_o, const Real* d_final_state,
                             Real* dq, Real* dk, Real* dv, Real* dbeta, Real* dg,
                             Real* d_initial_state);

// y = x / sqrt(sum(x^2) + 1e-6) over rows of `dim`, and its backward (dx may alias nothing).
template <typename Real>
void L2NormRows(const Real* x, int64_t rows, int dim, Real* y);
template <typename Real>
void L2NormRowsBackward(const Real* x, const Real* dy, int64_t rows, int dim, Real* dx);

// chunk_delta_rule as fla's DeltaNet layer calls it: beta given directly ([B,T,H], usually a
// sigmoid from the layer), q and k optionally L2-normalised inside the op. Gradients are with
// respect to the raw q and k.
template <typename Real>
void DeltaRuleReferenceForward(const RecurrenceShape& shape, bool qk_l2norm, Real scale,
                               const Real* q, const Real* k, const Real* v, const Real* beta,
                               const Real* initial_state, Real* o, Real* final_state);

template <typename Real>
void DeltaRuleReferenceBackward(const RecurrenceShape& shape, bool qk_l2norm, Real scale,
                                const Real* q, const Real* k, const Real* v, const Real* beta,
                                const Real* initial_state, const Real* d_o,
                                const Real* d_final_state, Real* dq, Real* dk, Real* dv,
                                Real* dbeta, Real* d_initial_state);

}  // namespace flame::kernels
