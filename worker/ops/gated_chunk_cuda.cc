// CUDA paths of ChunkGla and ChunkSimpleGla: one torch::autograd::Function around the gated chunk
// launchers of kernels/gla and kernels/simple_gla (FLAME_CUDA builds only).
//
// The Function works on the kernels' types: bf16 q, k, v, fp32 gates and states, int32
// cu_seqlens with chunk offsets. The entry points convert into them with differentiable ATen ops
// (`to`, `contiguous`), so autograd casts the gradients back to whatever the caller passed.
// The saved tensors are the inputs, the intra-chunk scores the forward wrote for the backward
// (bf16 [chunks, H, 64, 64], half the size of q at K = 128) and the per-chunk states (bf16
// [chunks, H, K, V]: K V / 32 bytes per token and head, 2/3 of q, k and v at K = V = 128), so
// that the backward runs one sequential pass over the chunks instead of two (recomputing the
// states took 150-320 us of chunk_simple_gla's forward + backward at fla's long shapes on the
// H200).
#include <torch/torch.h>

#include <optional>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/gla/chunk_gla.h"
#include "kernels/simple_gla/chunk_simple_gla.h"
#include "worker/ops/cuda_ops.h"
#include "worker/ops/cuda_support.h"
#include "worker/ops/gla_internal.h"

namespace flame::worker::ops::cuda {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The largest K the kernels are tested for (issue 3: head dims 64, 128, 256); their shared memory
// grows with K.
constexpr int64_t kMaxKeyDim = 256;

// Fills the launchers' params from tensors already in the kernels' types.
kernels::ChunkGatedParams MakeParams(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& g,
                                     const torch::Tensor& g_gamma, const torch::Tensor& h0,
                                     const ChunkSeqlens& seqs, double scale, bool channel_gate) {
  kernels::ChunkGatedParams p;
  SetChunkInputs(q, k, v, h0, seqs, scale, &p);
  p.g = Fp32Ptr(g);
  // A per-channel gate is laid out like q; a per-head one has no feature dimension.
  p.g_strides = channel_gate ? p.qk_strides : kernels::ContiguousStrides(p.seq_len, p.heads, 1);
  p.g_gamma = Fp32Ptr(g_gamma);
  return p;
}

constexpr ChunkLaunchers<kernels::ChunkGatedParams> kGla = {
    "GlaChunk", kernels::GlaChunkWorkspaceBytes, kernels::GlaChunkForward,
    kernels::GlaChunkBackward};
constexpr ChunkLaunchers<kernels::ChunkGatedParams> kSimpleGla = {
    "SimpleGlaChunk", kernels::SimpleGlaChunkWorkspaceBytes, kernels::SimpleGlaChunkForward,
    kernels::SimpleGlaChunkBackward};

class GatedChunkFunction : public torch::autograd::Function<GatedChunkFunction> {
 public:
  // q, k [B,T,H,K] and v [B,T,H,V] bf16; g fp32 [B,T,H,K] (channel_gate) or [B,T,H], or
  // undefined with g_gamma fp32 [H]; h0 fp32 [N,H,K,V] or undefined; cu_seqlens and
  // chunk_offsets int32 [N+1] or undefined. All contiguous, aligned, on one device.
  // Returns {o bf16 [B,T,H,V], final state fp32 [N,H,K,V] (or [0] when not requested)}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const OptionalTensor& g_in,
                               const OptionalTensor& g_gamma_in, const OptionalTensor& h0_in,
                               const OptionalTensor& cu_seqlens_in,
                               const OptionalTensor& chunk_offsets_in, int64_t total_chunks,
                               double scale, bool channel_gate, bool output_final_state) {
    const torch::Tensor g = Value(g_in), g_gamma = Value(g_gamma_in), h0 = Value(h0_in);
    const ChunkSeqlens seqs{Value(cu_seqlens_in), Value(chunk_offsets_in), total_chunks};
    const c10::cuda::CUDAGuard guard(q.device());
    kernels::ChunkGatedParams p = MakeParams(q, k, v, g, g_gamma, h0, seqs, scale, channel_gate);
    // The intra-chunk scores, kept for the backward.
    const size_t scores_bytes = channel_gate ? kernels::GlaChunkScoresBytes(p)
                                             : kernels::SimpleGlaChunkScoresBytes(p);
    const torch::Tensor scores = torch::empty({static_cast<int64_t>(scores_bytes)},
                                              q.options().dtype(torch::kUInt8));
    p.intra_scores = static_cast<__nv_bfloat16*>(scores.data_ptr());
    const size_t states_bytes =
        channel_gate ? kernels::GlaChunkStatesBytes(p) : kernels::SimpleGlaChunkStatesBytes(p);
    const torch::Tensor states =
        torch::empty({static_cast<int64_t>(states_bytes)}, q.options().dtype(torch::kUInt8));
    p.chunk_states = static_cast<__nv_bfloat16*>(states.data_ptr());
    const variable_list out =
        RunChunkForward(channel_gate ? kGla : kSimpleGla, q, v, seqs, output_final_state, &p);

    ctx->save_for_backward(
        {q, k, v, g, g_gamma, h0, seqs.cu_seqlens, seqs.chunk_offsets, scores, states});
    ctx->saved_data["total_chunks"] = total_chunks;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["channel_gate"] = channel_gate;
    if (!output_final_state) ctx->mark_non_differentiable({out[1]});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &g = saved[3],
                        &g_gamma = saved[4], &h0 = saved[5];
    const bool channel_gate = ctx->saved_data["channel_gate"].toBool();
    const c10::cuda::CUDAGuard guard(q.device());
    const ChunkSeqlens seqs{saved[6], saved[7], ctx->saved_data["total_chunks"].toInt()};
    kernels::ChunkGatedParams p = MakeParams(q, k, v, g, g_gamma, h0, seqs,
                                             ctx->saved_data["scale"].toDouble(), channel_gate);
    p.intra_scores = static_cast<__nv_bfloat16*>(saved[8].data_ptr());
    p.chunk_states = static_cast<__nv_bfloat16*>(saved[9].data_ptr());
    const torch::Tensor dg = g.defined() ? torch::empty_like(g) : torch::Tensor();
    p.dg = Fp32Ptr(dg);
    const ChunkGrads d = RunChunkBackward(channel_gate ? kGla : kSimpleGla, grads, q, k, v, h0, &p);
    // One gradient per forward argument; g_gamma is a constant, the rest are not differentiable.
    return {d.dq, d.dk, d.dv, dg, {}, d.dh0, {}, {}, {}, {}, {}, {}};
  }
};

// Converts to the kernels' types (differentiably), runs the Function, converts back.
GlaOutput Run(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
              const torch::Tensor& g, const torch::Tensor& g_gamma, double scale,
              const torch::Tensor& initial_state, bool output_final_state,
              const torch::Tensor& cu_seqlens, bool channel_gate) {
  const ChunkSeqlens seqs = DeviceChunkSeqlens(cu_seqlens, q.device());
  const variable_list out = GatedChunkFunction::apply(
      Bf16(q), Bf16(k), Bf16(v), Optional(Fp32(g)),
      Optional(Fp32(g_gamma.defined() ? g_gamma.detach() : g_gamma)), Optional(Fp32(initial_state)),
      Optional(seqs.cu_seqlens), Optional(seqs.chunk_offsets), seqs.total_chunks, scale,
      channel_gate, output_final_state);
  GlaOutput result;
  result.output = out[0].to(v.scalar_type());
  if (output_final_state) result.final_state = out[1];
  return result;
}

}  // namespace

std::optional<GlaOutput> ChunkGla(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, const torch::Tensor& g, double scale,
                                  const torch::Tensor& initial_state, bool output_final_state,
                                  const torch::Tensor& cu_seqlens) {
  internal::CheckGlaArguments(q, k, v, g, initial_state, cu_seqlens);
  CheckDevice("ChunkGla", q.device(), {k, v, g, initial_state});
  if (const auto why = UnsupportedChunkShapes(q, v, kMaxKeyDim)) {
    TORCH_WARN_ONCE("ChunkGla runs the ATen reference on the GPU for ", *why);
    return std::nullopt;
  }
  return Run(q, k, v, g, {}, scale, initial_state, output_final_state, cu_seqlens, true);
}

std::optional<GlaOutput> ChunkSimpleGla(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& g,
                                        const torch::Tensor& g_gamma, double scale,
                                        const torch::Tensor& initial_state, bool output_final_state,
                                        const torch::Tensor& cu_seqlens) {
  // The broadcast gate is only for the checks (shapes of q, k, v, states, cu_seqlens).
  const torch::Tensor channel_gate = internal::SimpleGlaChannelGate(q, g, g_gamma);
  internal::CheckGlaArguments(q, k, v, channel_gate, initial_state, cu_seqlens);
  CheckDevice("ChunkSimpleGla", q.device(), {k, v, g, g_gamma, initial_state});
  if (const auto why = UnsupportedChunkShapes(q, v, kMaxKeyDim)) {
    TORCH_WARN_ONCE("ChunkSimpleGla runs the ATen reference on the GPU for ", *why);
    return std::nullopt;
  }
  return Run(q, k, v, g, g_gamma, scale, initial_state, output_final_state, cu_seqlens, false);
}

}  // namespace flame::worker::ops::cuda
