// Delta-rule entry points: argument checks, device dispatch (CUDA tensors to delta_rule_cuda.cc in
// FLAME_CUDA builds), the naive recurrence, and the varlen split shared by the algorithms. The
// chunked algorithm itself is in delta_rule_chunk_reference.cc.
#include "worker/ops/delta_rule.h"

#include <torch/torch.h>

#include <vector>

#include "worker/ops/cuda_ops.h"
#include "worker/ops/delta_rule_internal.h"

namespace flame::worker::ops {
namespace internal {
namespace {

// The number of states the call works on: B, or the number of packed sequences.
int64_t CheckCuSeqlens(const char* op, const torch::Tensor& q, const torch::Tensor& cu_seqlens) {
  if (!cu_seqlens.defined()) return q.size(0);
  TORCH_CHECK(q.size(0) == 1, op,
              ": cu_seqlens needs B == 1 (packed sequences), got B = ", q.size(0));
  TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2, op,
              ": cu_seqlens must be [N + 1] with N >= 1, got ", cu_seqlens.sizes());
  TORCH_CHECK(!cu_seqlens.is_floating_point(), op, ": cu_seqlens must be an integer tensor");
  const torch::Tensor bounds = cu_seqlens.to(torch::kCPU, torch::kLong);
  TORCH_CHECK(bounds[0].item<int64_t>() == 0 && bounds[-1].item<int64_t>() == q.size(1), op,
              ": cu_seqlens must start at 0 and end at T = ", q.size(1));
  TORCH_CHECK((bounds.slice(0, 1) > bounds.slice(0, 0, -1)).all().item<bool>(), op,
              ": cu_seqlens must be strictly increasing (no empty sequences)");
  return cu_seqlens.size(0) - 1;
}

}  // namespace

void CheckDeltaRuleArguments(const char* op, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, const torch::Tensor& g,
                             const torch::Tensor& beta, const torch::Tensor& initial_state,
                             const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(q.defined() && q.dim() == 4, op, ": q must be [B, T, H, K]");
  TORCH_CHECK(k.defined() && k.sizes() == q.sizes(), op, ": k must match q ", q.sizes());
  TORCH_CHECK(v.defined() && v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1) &&
                  v.size(2) == q.size(2),
              op, ": v must be [B, T, H, V] with q's B, T, H = ", q.sizes().slice(0, 3));
  TORCH_CHECK(q.is_floating_point() && k.scalar_type() == q.scalar_type() &&
                  v.scalar_type() == q.scalar_type(),
              op, ": q, k, v must share one floating dtype");
  const at::IntArrayRef per_head = q.sizes().slice(0, 3);  // [B, T, H]
  TORCH_CHECK(beta.defined() && beta.sizes() == per_head && beta.is_floating_point(), op,
              ": beta must be floating [B, T, H] = ", per_head);
  if (g.defined()) {
    TORCH_CHECK(g.sizes() == per_head && g.is_floating_point(), op,
                ": g must be floating [B, T, H] = ", per_head);
  }
  const int64_t num_states = CheckCuSeqlens(op, q, cu_seqlens);
  if (initial_state.defined()) {
    TORCH_CHECK(initial_state.dim() == 4 && initial_state.size(0) == num_states &&
                    initial_state.size(1) == q.size(2) && initial_state.size(2) == q.size(3) &&
                    initial_state.size(3) == v.size(3),
                op, ": initial_state must be [N, H, K, V] = [", num_states, ", ", q.size(2), ", ",
                q.size(3), ", ", v.size(3), "]");
  }
}

DeltaRuleOutput SplitDeltaRuleSequences(const DenseDeltaRule& dense, const torch::Tensor& q,
                                        const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& g, const torch::Tensor& beta,
                                        double scale, const torch::Tensor& initial_state,
                                        bool output_final_state, const torch::Tensor& cu_seqlens) {
  if (!cu_seqlens.defined()) {
    return dense(q, k, v, g, beta, scale, initial_state, output_final_state);
  }
  const torch::Tensor bounds = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* at = bounds.data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs, states;
  for (int64_t n = 0; n + 1 < bounds.size(0); ++n) {
    const int64_t begin = at[n], length = at[n + 1] - at[n];
    const auto part = [&](const torch::Tensor& x) {
      return x.defined() ? x.narrow(1, begin, length) : x;
    };
    const torch::Tensor h0 =
        initial_state.defined() ? initial_state.narrow(0, n, 1) : torch::Tensor();
    // Each sequence runs as its own [1, T_n, H, D] problem: its chunks start at its first token.
    DeltaRuleOutput out =
        dense(part(q), part(k), part(v), part(g), part(beta), scale, h0, output_final_state);
    outputs.push_back(out.output);
    if (output_final_state) states.push_back(out.final_state);
  }
  DeltaRuleOutput result;
  result.output = torch::cat(outputs, 1);
  if (output_final_state) result.final_state = torch::cat(states, 0);
  return result;
}

}  // namespace internal

namespace {

// One [B, T, H, *] problem, one time step at a time, in the delta form fla's naive reference
// uses: decay the state, read what it predicts for k_t, write β_t times the correction.
DeltaRuleOutput NaiveDense(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& g, const torch::Tensor& beta, double scale,
                           const torch::Tensor& initial_state, bool output_final_state) {
  const torch::ScalarType type = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const torch::Tensor qf = q.to(type) * scale, kf = k.to(type), vf = v.to(type);
  const torch::Tensor bf = beta.to(type);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  torch::Tensor state = initial_state.defined()
                            ? initial_state.to(type)
                            : torch::zeros({B, H, K, V}, q.options().dtype(type));  // [B, H, K, V]
  std::vector<torch::Tensor> outputs;
  outputs.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    if (g.defined()) state = g.select(1, t).to(type).exp().view({B, H, 1, 1}) * state;
    const torch::Tensor k_t = kf.select(1, t);                            // [B, H, K]
    const torch::Tensor predicted = (k_t.unsqueeze(-1) * state).sum(-2);  // Sᵀk  [B, H, V]
    const torch::Tensor write =
        bf.select(1, t).unsqueeze(-1) * (vf.select(1, t) - predicted);  // [B, H, V]
    state = state + k_t.unsqueeze(-1) * write.unsqueeze(-2);
    outputs.push_back((qf.select(1, t).unsqueeze(-1) * state).sum(-2));  // [B, H, V]
  }
  DeltaRuleOutput result;
  result.output = torch::stack(outputs, 1).to(v.scalar_type());  // [B, T, H, V]
  if (output_final_state) result.final_state = state;
  return result;
}

}  // namespace

DeltaRuleOutput NaiveDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& beta, double scale,
                               const torch::Tensor& initial_state, bool output_final_state,
                               const torch::Tensor& cu_seqlens) {
  internal::CheckDeltaRuleArguments("delta rule", q, k, v, {}, beta, initial_state, cu_seqlens);
  return internal::SplitDeltaRuleSequences(NaiveDense, q, k, v, {}, beta, scale, initial_state,
                                           output_final_state, cu_seqlens);
}

DeltaRuleOutput NaiveGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& g,
                                    const torch::Tensor& beta, double scale,
                                    const torch::Tensor& initial_state, bool output_final_state,
                                    const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(g.defined(), "gated delta rule: g is required");
  internal::CheckDeltaRuleArguments("gated delta rule", q, k, v, g, beta, initial_state,
                                    cu_seqlens);
  return internal::SplitDeltaRuleSequences(NaiveDense, q, k, v, g, beta, scale, initial_state,
                                           output_final_state, cu_seqlens);
}

DeltaRuleOutput ChunkDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& beta, double scale,
                               const torch::Tensor& initial_state, bool output_final_state,
                               const torch::Tensor& cu_seqlens) {
#ifdef FLAME_WITH_CUDA
  if (q.is_cuda()) {
    if (auto out = cuda::ChunkDeltaRule(q, k, v, beta, scale, initial_state, output_final_state,
                                        cu_seqlens)) {
      return *std::move(out);
    }
  }
#endif
  return ChunkDeltaRuleReference(q, k, v, /*g=*/{}, beta, scale, initial_state, output_final_state,
                                 cu_seqlens);
}

DeltaRuleOutput ChunkGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& g,
                                    const torch::Tensor& beta, double scale,
                                    const torch::Tensor& initial_state, bool output_final_state,
                                    const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(g.defined(), "gated delta rule: g is required");
#ifdef FLAME_WITH_CUDA
  if (q.is_cuda()) {
    if (auto out = cuda::ChunkGatedDeltaRule(q, k, v, g, beta, scale, initial_state,
                                             output_final_state, cu_seqlens)) {
      return *std::move(out);
    }
  }
#endif
  return ChunkDeltaRuleReference(q, k, v, g, beta, scale, initial_state, output_final_state,
                                 cu_seqlens);
}

}  // namespace flame::worker::ops
