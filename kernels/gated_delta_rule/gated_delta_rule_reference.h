// fp32 CPU reference for chunk_gated_delta_rule (Gated DeltaNet) with the in-kernel options fla's
// GatedDeltaNet layer turns on (fla.md §1.5, §2.1):
//   g_t    = -exp(A_log[h]) * softplus(a_t + dt_bias[h])   (gate_in_kernel; else g_t = a_t)
//            softplus(x) = log(1 + e^x), and x itself above 20 (fla's threshold)
//   beta_t = sigmoid(b_t)                                  (beta_sigmoid; else beta_t = b_t)
//   q, k   = x / sqrt(sum(x^2) + 1e-6)                      (qk_l2norm)
//   S_t    = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,  o_t = scale S_t^T q_t
// The recurrence itself is DeltaRecurrence{Forward,Backward} (kernels/delta_rule); this file adds
// the input transforms and their gradients. Templates instantiated for float and double.
//
// Tensors (contiguous): q, k, dq, dk [B,T,H,K]; v, o, d_o, dv [B,T,H,V]; a, b, da, db [B,T,H];
// A_log, dt_bias and their gradients [H]; states [N,H,K,V].
#pragma once

#include "kernels/common/gated_recurrence_reference.h"

namespace flame::kernels {

struct GatedDeltaRuleOptions {
  bool qk_l2norm = true;
  bool gate_in_kernel = true;
  bool beta_sigmoid = true;
};

template <typename Real>
struct GatedDeltaRuleInputs {
  const Real* q = nullptr;
  const Real* k = nullptr;
  const Real* v = nullptr;
  const Real* a = nullptr;              // gate input (gate_in_kernel) or the log decay g itself
  const Real* b = nullptr;              // beta logits (beta_sigmoid) or beta itself
  const Real* A_log = nullptr;          // [H], gate_in_kernel only
  const Real* dt_bias = nullptr;        // [H], gate_in_kernel only
  const Real* initial_state = nullptr;  // optional
};

// Any pointer may be null (that gradient is not written); dA_log and ddt_bias need
// gate_in_kernel and are sums over every token of the head.
template <typename Real>
struct GatedDeltaRuleGrads {
  Real* dq = nullptr;
  Real* dk = nullptr;
  Real* dv = nullptr;
  Real* da = nullptr;
  Real* db = nullptr;
  Real* dA_log = nullptr;
  Real* ddt_bias = nullptr;
  Real* d_initial_state = nullptr;
};

// The transforms alone: g (natural-log decay) and beta [B,T,H] from a and b.
template <typename Real>
void GatedDeltaRuleGateAndBeta(const RecurrenceShape& shape, const GatedDeltaRuleOptions& options,
                               const GatedDeltaRuleInputs<Real>& in, Real* g, Real* beta);

template <typename Real>
void GatedDeltaRuleReferenceForward(const RecurrenceShape& shape,
                                    const GatedDeltaRuleOptions& options, Real scale,
                                    const GatedDeltaRuleInputs<Real>& in, Real* o,
                                    Real* final_state);

// d_final_state may be null (zero).
template <typename Real>
void GatedDeltaRuleReferenceBackward(const RecurrenceShape& shape,
                                     const GatedDeltaRuleOptions& options, Real scale,
                                     const GatedDeltaRuleInputs<Real>& in, const Real* d_o,
                                     const Real* d_final_state,
                                     const GatedDeltaRuleGrads<Real>& grads);

}  // namespace flame::kernels
