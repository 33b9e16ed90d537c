#include "kernels/common/gated_recurrence_reference.h"

#include <algorithm>
#include <cstddef>
#include <cmath>

#include "kernels/common/recurrence_slices.h"

namespace flame::kernels {
namespace {

using reference::At;
using reference::Slice;
using reference::Slices;

// S <- diag(exp(g)) S + k v^T for one token.
template <typename Real>
void Step(int K, int V, const Real* k, const Real* v, const Real* g, Real* S) {
  for (int i = 0; i < K; ++i) {
    const Real decay = std::exp(g[i]);
    for (int j = 0; j < V; ++j) S[i * V + j] = decay * S[i * V + j] + k[i] * v[j];
  }
}

}  // namespace

template <typename Real>
void GatedRecurrenceForward(const RecurrenceShape& shape, Real scale, const Real* q, const Real* k,
                            const Real* v, const Real* g, const Real* initial_state, Real* o,
                            Real* final_state) {
  const int H = shape.heads, K = shape.k_dim, V = shape.v_dim;
  std::vector<Real> S(static_cast<size_t>(K) * V);
  for (const Slice& sl : Slices(shape)) {
    for (int h = 0; h < H; ++h) {
      const int64_t state = (int64_t{sl.seq} * H + h) * K * V;
      if (initial_state) {
        std::copy(initial_state + state, initial_state + state + K * V, S.begin());
      } else {
        std::fill(S.begin(), S.end(), Real(0));
      }
      for (int t = 0; t < sl.len; ++t) {
        const int64_t row = sl.first_row + t;
        Step(K, V, k + At(row, h, H, K), v + At(row, h, H, V), g + At(row, h, H, K), S.data());
        const Real* qt = q + At(row, h, H, K);
        Real* ot = o + At(row, h, H, V);
        for (int j = 0; j < V; ++j) {
          Real acc = 0;
          for (int i = 0; i < K; ++i) acc += S[i * V + j] * qt[i];
          ot[j] = scale * acc;
        }
      }
      if (final_state) std::copy(S.begin(), S.end(), final_state + state);
    }
  }
}

// The reverse pass needs S_{t-1} and S_t at every step. States are checkpointed every kSegment
// tokens in the forward sweep and each segment is recomputed before it is walked backwards, so
// memory stays O(kSegment * K * V) whatever the sequence length.
template <typename Real>
void GatedRecurrenceBackward(const RecurrenceShape& shape, Real scale, const Real* q,
                             const Real* k, const Real* v, const Real* g,
                             const Real* initial_state, const Real* d_o,
                             const Real* d_final_state, Real* dq, Real* dk, Real* dv, Real* dg,
                             Real* d_initial_state) {
  constexpr int kSegment = 64;
  const int H = shape.heads, K = shape.k_dim, V = shape.v_dim;
  const size_t KV = static_cast<size_t>(K) * V;
  std::vector<Real> dS(KV);
  for (const Slice& sl : Slices(shape)) {
    for (int h = 0; h < H; ++h) {
      const int64_t state = (int64_t{sl.seq} * H + h) * K * V;
      const int segments = (sl.len + kSegment - 1) / kSegment;
      // checkpoints[s] = state before token s * kSegment.
      std::vector<Real> checkpoints((segments + 1) * KV, Real(0));
      if (initial_state) std::copy(initial_state + state, initial_state + state + KV, checkpoints.begin());
      for (int s = 0; s < segments; ++s) {
        std::copy(checkpoints.begin() + s * KV, checkpoints.begin() + (s + 1) * KV,
                  checkpoints.begin() + (s + 1) * KV);
        Real* S = checkpoints.data() + (s + 1) * KV;
        for (int t = s * kSegment; t < std::min(sl.len, (s + 1) * kSegment); ++t) {
          const int64_t row = sl.first_row + t;
          Step(K, V, k + At(row, h, H, K), v + At(row, h, H, V), g + At(row, h, H, K), S);
        }
      }
      if (d_final_state) {
        std::copy(d_final_state + state, d_final_state + state + KV, dS.begin());
      } else {
        std::fill(dS.begin(), dS.end(), Real(0));
      }
      // states[i] = S after token (segment start + i - 1); states[0] = checkpoint.
      std::vector<Real> states((kSegment + 1) * KV);
      for (int s = segments - 1; s >= 0; --s) {
        const int t0 = s * kSegment, t1 = std::min(sl.len, (s + 1) * kSegment);
        std::copy(checkpoints.begin() + s * KV, checkpoints.begin() + (s + 1) * KV, states.begin());
        for (int t = t0; t < t1; ++t) {
          const int64_t row = sl.first_row + t;
          Real* S = states.data() + (t - t0 + 1) * KV;
          std::copy(S - KV, S, S);
          Step(K, V, k + At(row, h, H, K), v + At(row, h, H, V), g + At(row, h, H, K), S);
        }
        for (int t = t1 - 1; t >= t0; --t) {
          const int64_t row = sl.first_row + t;
          const Real* S_t = states.data() + (t - t0 + 1) * KV;
          const Real* S_prev = S_t - KV;
          const Real* qt = q + At(row, h, H, K);
          const Real* kt = k + At(row, h, H, K);
          const Real* vt = v + At(row, h, H, V);
          const Real* gt = g + At(row, h, H, K);
          const Real* dot = d_o + At(row, h, H, V);
          // o_t = scale S_t^T q_t: contributes to dS_t and dq_t.
          for (int i = 0; i < K; ++i) {
            Real acc = 0;
            for (int j = 0; j < V; ++j) {
              dS[i * V + j] += scale * qt[i] * dot[j];
              acc += S_t[i * V + j] * dot[j];
            }
            dq[At(row, h, H, K) + i] = scale * acc;
          }
          // S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T.
          for (int j = 0; j < V; ++j) {
            Real acc = 0;
            for (int i = 0; i < K; ++i) acc += dS[i * V + j] * kt[i];
            dv[At(row, h, H, V) + j] = acc;
          }
          for (int i = 0; i < K; ++i) {
            const Real decay = std::exp(gt[i]);
            Real acc_k = 0, acc_g = 0;
            for (int j = 0; j < V; ++j) {
              acc_k += dS[i * V + j] * vt[j];
              acc_g += dS[i * V + j] * S_prev[i * V + j];
            }
            dk[At(row, h, H, K) + i] = acc_k;
            dg[At(row, h, H, K) + i] = decay * acc_g;
            for (int j = 0; j < V; ++j) dS[i * V + j] *= decay;
          }
        }
      }
      if (d_initial_state) std::copy(dS.begin(), dS.end(), d_initial_state + state);
    }
  }
}

template void GatedRecurrenceForward<float>(const RecurrenceShape&, float, const float*,
                                            const float*, const float*, const float*,
                                            const float*, float*, float*);
template void GatedRecurrenceForward<double>(const RecurrenceShape&, double, const double*,
                                             const double*, const double*, const double*,
                                             const double*, double*, double*);
template void GatedRecurrenceBackward<float>(const RecurrenceShape&, float, const float*,
                                             const float*, const float*, const float*,
                                             const float*, const float*, const float*, float*,
                                             float*, float*, float*, float*);
template void GatedRecurrenceBackward<double>(const RecurrenceShape&, double, const double*,
                                              const double*, const double*, const double*,
                                              const double*, const double*, const double*,
                                              double*, double*, double*, double*, double*);

}  // namespace flame::kernels
