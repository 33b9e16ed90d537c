// GLA and simple GLA entry points: argument checks, device dispatch (CUDA tensors to
// gated_chunk_cuda.cc in FLAME_CUDA builds), the naive recurrence, and the varlen split shared by
// the algorithms. The chunked algorithm itself is in gla_chunk_reference.cc.
#include "worker/ops/gla.h"

#include <torch/torch.h>

#include <vector>

#include "worker/ops/cuda_ops.h"
#include "worker/ops/gla_internal.h"
#include "worker/ops/simple_gla.h"

namespace flame::worker::ops {
namespace internal {

void CheckGlaArguments(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& g, const torch::Tensor& initial_state,
                       const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(q.dim() == 4, "GLA: q must be [B, T, H, K], got ", q.sizes());
  TORCH_CHECK(k.sizes() == q.sizes(), "GLA: k ", k.sizes(), " must match q ", q.sizes());
  TORCH_CHECK(g.sizes() == q.sizes(), "GLA: g ", g.sizes(), " must match q ", q.sizes());
  TORCH_CHECK(
      v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1) && v.size(2) == q.size(2),
      "GLA: v must be [B, T, H, V] with q's B, T, H; got ", v.sizes());
  TORCH_CHECK(q.is_floating_point() && k.scalar_type() == q.scalar_type() &&
                  v.scalar_type() == q.scalar_type(),
              "GLA: q, k, v must share one floating dtype");
  TORCH_CHECK(g.is_floating_point(), "GLA: g must be floating point");
  int64_t num_states = q.size(0);
  if (cu_seqlens.defined()) {
    TORCH_CHECK(q.size(0) == 1,
                "GLA: cu_seqlens needs B == 1 (packed sequences), got B = ", q.size(0));
    TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2,
                "GLA: cu_seqlens must be [N + 1] with N >= 1");
    const torch::Tensor bounds = cu_seqlens.to(torch::kCPU, torch::kLong);
    TORCH_CHECK(bounds[0].item<int64_t>() == 0 && bounds[-1].item<int64_t>() == q.size(1),
                "GLA: cu_seqlens must start at 0 and end at T = ", q.size(1));
    TORCH_CHECK((bounds.slice(0, 1) > bounds.slice(0, 0, -1)).all().item<bool>(),
                "GLA: cu_seqlens must be strictly increasing (no empty sequences)");
    num_states = cu_seqlens.size(0) - 1;
  }
  if (initial_state.defined()) {
    TORCH_CHECK(initial_state.dim() == 4 && initial_state.size(0) == num_states &&
                    initial_state.size(1) == q.size(2) && initial_state.size(2) == q.size(3) &&
                    initial_state.size(3) == v.size(3),
                "GLA: initial_state must be [N, H, K, V] = [", num_states, ", ", q.size(2), ", ",
                q.size(3), ", ", v.size(3), "], got ", initial_state.sizes());
  }
}

torch::ScalarType ComputeType(const torch::Tensor& q) {
  return q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

GlaOutput SplitSequences(const DenseGla& dense, const torch::Tensor& q, const torch::Tensor& k,
                         const torch::Tensor& v, const torch::Tensor& g, double scale,
                         const torch::Tensor& initial_state, bool output_final_state,
                         const torch::Tensor& cu_seqlens) {
  if (!cu_seqlens.defined()) return dense(q, k, v, g, scale, initial_state, output_final_state);
  const torch::Tensor bounds = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* at = bounds.data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs, states;
  for (int64_t n = 0; n + 1 < bounds.size(0); ++n) {
    const int64_t begin = at[n], length = at[n + 1] - at[n];
    const torch::Tensor h0 =
        initial_state.defined() ? initial_state.narrow(0, n, 1) : torch::Tensor();
    // Each sequence runs as its own [1, T_n, H, D] problem: its chunks start at its first token.
    GlaOutput part =
        dense(q.narrow(1, begin, length), k.narrow(1, begin, length), v.narrow(1, begin, length),
              g.narrow(1, begin, length), scale, h0, output_final_state);
    outputs.push_back(part.output);
    if (output_final_state) states.push_back(part.final_state);
  }
  GlaOutput result;
  result.output = torch::cat(outputs, 1);
  if (output_final_state) result.final_state = torch::cat(states, 0);
  return result;
}

}  // namespace internal

namespace {

// One [B, T, H, *] problem, one time step at a time.
GlaOutput NaiveDense(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& g, double scale, const torch::Tensor& initial_state,
                     bool output_final_state) {
  const torch::ScalarType type = internal::ComputeType(q);
  const torch::Tensor qf = q.to(type) * scale, kf = k.to(type), vf = v.to(type), gf = g.to(type);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  torch::Tensor state = initial_state.defined()
                            ? initial_state.to(type)
                            : torch::zeros({B, H, K, V}, q.options().dtype(type));  // [B, H, K, V]
  std::vector<torch::Tensor> outputs;
  outputs.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const torch::Tensor q_t = qf.select(1, t), k_t = kf.select(1, t);  // [B, H, K]
    const torch::Tensor v_t = vf.select(1, t);                         // [B, H, V]
    state = gf.select(1, t).exp().unsqueeze(-1) * state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2);
    outputs.push_back((q_t.unsqueeze(-1) * state).sum(-2));  // [B, H, V]
  }
  GlaOutput result;
  result.output = torch::stack(outputs, 1).to(v.scalar_type());  // [B, T, H, V]
  if (output_final_state) result.final_state = state;
  return result;
}

}  // namespace

GlaOutput NaiveGla(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const torch::Tensor& g, double scale, const torch::Tensor& initial_state,
                   bool output_final_state, const torch::Tensor& cu_seqlens) {
  internal::CheckGlaArguments(q, k, v, g, initial_state, cu_seqlens);
  return internal::SplitSequences(NaiveDense, q, k, v, g, scale, initial_state, output_final_state,
                                  cu_seqlens);
}

GlaOutput ChunkGla(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const torch::Tensor& g, double scale, const torch::Tensor& initial_state,
                   bool output_final_state, const torch::Tensor& cu_seqlens) {
#ifdef FLAME_WITH_CUDA
  if (q.is_cuda()) {
    if (auto out =
            cuda::ChunkGla(q, k, v, g, scale, initial_state, output_final_state, cu_seqlens)) {
      return *std::move(out);
    }
  }
#endif
  return ChunkGlaReference(q, k, v, g, scale, initial_state, output_final_state, cu_seqlens);
}

namespace internal {

torch::Tensor SimpleGlaChannelGate(const torch::Tensor& q, const torch::Tensor& g,
                                   const torch::Tensor& g_gamma) {
  TORCH_CHECK(q.dim() == 4, "simple GLA: q must be [B, T, H, K], got ", q.sizes());
  TORCH_CHECK(g.defined() != g_gamma.defined(),
              "simple GLA: give exactly one of g [B, T, H] and g_gamma [H]");
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3);
  if (g.defined()) {
    TORCH_CHECK(g.dim() == 3 && g.size(0) == B && g.size(1) == T && g.size(2) == H,
                "simple GLA: g must be [B, T, H] = [", B, ", ", T, ", ", H, "], got ", g.sizes());
    TORCH_CHECK(g.is_floating_point(), "simple GLA: g must be floating point");
    return g.unsqueeze(-1).expand({B, T, H, K});
  }
  TORCH_CHECK(g_gamma.dim() == 1 && g_gamma.size(0) == H, "simple GLA: g_gamma must be [H] = [", H,
              "], got ", g_gamma.sizes());
  TORCH_CHECK(g_gamma.is_floating_point(), "simple GLA: g_gamma must be floating point");
  return g_gamma.detach().view({1, 1, H, 1}).expand({B, T, H, K});
}

}  // namespace internal

GlaOutput ChunkSimpleGlaReference(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, const torch::Tensor& g,
                                  const torch::Tensor& g_gamma, double scale,
                                  const torch::Tensor& initial_state, bool output_final_state,
                                  const torch::Tensor& cu_seqlens) {
  // A per-head gate is a per-channel gate that is equal across K: the GLA chunk algorithm takes it
  // broadcast, and the expand's backward sums dg over K.
  const torch::Tensor channel_gate = internal::SimpleGlaChannelGate(q, g, g_gamma);
  return ChunkGlaReference(q, k, v, channel_gate, scale, initial_state, output_final_state,
                           cu_seqlens);
}

GlaOutput ChunkSimpleGla(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& g, const torch::Tensor& g_gamma, double scale,
                         const torch::Tensor& initial_state, bool output_final_state,
                         const torch::Tensor& cu_seqlens) {
#ifdef FLAME_WITH_CUDA
  if (q.is_cuda()) {
    if (auto out = cuda::ChunkSimpleGla(q, k, v, g, g_gamma, scale, initial_state,
                                        output_final_state, cu_seqlens)) {
      return *std::move(out);
    }
  }
#endif
  return ChunkSimpleGlaReference(q, k, v, g, g_gamma, scale, initial_state, output_final_state,
                                 cu_seqlens);
}

}  // namespace flame::worker::ops
