// CUDA paths of ChunkDeltaRule and ChunkGatedDeltaRule: one torch::autograd::Function around the
// chunk launchers of kernels/delta_rule and kernels/gated_delta_rule (FLAME_CUDA builds only).
//
// The op contract (delta_rule.h) leaves the input transforms to the layer: q and k arrive
// L2-normalised, beta is already the sigmoid and g is the log decay itself. So the kernels run
// with qk_l2norm, beta_sigmoid and gate_in_kernel off: params.beta is beta, params.a is g, and the
// gradients they write (dq, dk, dbeta, da) are those of the op's own inputs, da being dg.
//
// As in gated_chunk_cuda.cc, the Function works on the kernels' types (bf16 q, k, v; fp32 beta,
// g and states; int32 cu_seqlens with chunk offsets), the entry points convert into them
// differentiably. The saved tensors are the inputs and what the forward keeps for the backward
// (ChunkDeltaParams::chunk_states: the per-chunk states, the chunks' new values, W and the chunk
// matrices M and T with KD -- 1.8 times the bytes of q, k and v at K = V = 128), which spare the
// backward the forward's sequential state pass (587 us of 7.2 ms forward + backward at
// (1,8192,96,128) on the H200, ncu) and its per-chunk preparation (then 6.50 -> 5.91 ms there,
// side by side); the backward recomputes only the row scalars and the gate's cumsum.
#include <torch/torch.h>

#include <optional>

#include "kernels/delta_rule/chunk_delta_params.h"
#include "kernels/delta_rule/chunk_delta_rule.h"
#include "kernels/gated_delta_rule/chunk_gated_delta_rule.h"
#include "worker/ops/cuda_ops.h"
#include "worker/ops/cuda_support.h"
#include "worker/ops/delta_rule_internal.h"

namespace flame::worker::ops::cuda {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Fills the launchers' params from tensors already in the kernels' types; g undefined: the
// ungated rule.
kernels::ChunkDeltaParams MakeParams(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& beta,
                                     const torch::Tensor& g, const torch::Tensor& h0,
                                     const ChunkSeqlens& seqs, double scale) {
  kernels::ChunkDeltaParams p;
  SetChunkInputs(q, k, v, h0, seqs, scale, &p);
  // The layer did these (delta_rule.h): the kernels take q, k, beta and g as they are.
  p.qk_l2norm = false;
  p.beta_sigmoid = false;
  p.gate_in_kernel = false;
  p.beta = Fp32Ptr(beta);
  p.a = Fp32Ptr(g);  // the log decay itself without gate_in_kernel; null for the ungated rule
  p.scalar_strides = kernels::ContiguousStrides(p.seq_len, p.heads, 1);
  return p;
}

constexpr ChunkLaunchers<kernels::ChunkDeltaParams> kDeltaRule = {
    "DeltaRuleChunk", kernels::DeltaRuleChunkWorkspaceBytes, kernels::DeltaRuleChunkForward,
    kernels::DeltaRuleChunkBackward};
constexpr ChunkLaunchers<kernels::ChunkDeltaParams> kGatedDeltaRule = {
    "GatedDeltaRuleChunk", kernels::GatedDeltaRuleChunkWorkspaceBytes,
    kernels::GatedDeltaRuleChunkForward, kernels::GatedDeltaRuleChunkBackward};

class DeltaRuleChunkFunction : public torch::autograd::Function<DeltaRuleChunkFunction> {
 public:
  // q, k [B,T,H,K] and v [B,T,H,V] bf16; beta fp32 [B,T,H]; g fp32 [B,T,H] (the gated rule) or
  // undefined; h0 fp32 [N,H,K,V] or undefined; cu_seqlens and chunk_offsets int32 [N+1] or
  // undefined. All contiguous, aligned, on one device.
  // Returns {o bf16 [B,T,H,V], final state fp32 [N,H,K,V] (or [0] when not requested)}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& beta,
                               const OptionalTensor& g_in, const OptionalTensor& h0_in,
                               const OptionalTensor& cu_seqlens_in,
                               const OptionalTensor& chunk_offsets_in, int64_t total_chunks,
                               double scale, bool output_final_state) {
    const torch::Tensor g = Value(g_in), h0 = Value(h0_in);
    const ChunkSeqlens seqs{Value(cu_seqlens_in), Value(chunk_offsets_in), total_chunks};
    const c10::cuda::CUDAGuard guard(q.device());
    kernels::ChunkDeltaParams p = MakeParams(q, k, v, beta, g, h0, seqs, scale);
    const size_t states_bytes = g.defined() ? kernels::GatedDeltaRuleChunkStatesBytes(p)
                                            : kernels::DeltaRuleChunkStatesBytes(p);
    const torch::Tensor states =
        torch::empty({static_cast<int64_t>(states_bytes)}, q.options().dtype(torch::kUInt8));
    p.chunk_states = states.data_ptr();
    const variable_list out = RunChunkForward(g.defined() ? kGatedDeltaRule : kDeltaRule, q, v,
                                              seqs, output_final_state, &p);

    ctx->save_for_backward({q, k, v, beta, g, h0, seqs.cu_seqlens, seqs.chunk_offsets, states});
    ctx->saved_data["total_chunks"] = total_chunks;
    ctx->saved_data["scale"] = scale;
    if (!output_final_state) ctx->mark_non_differentiable({out[1]});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &beta = saved[3],
                        &g = saved[4], &h0 = saved[5];
    const c10::cuda::CUDAGuard guard(q.device());
    const ChunkSeqlens seqs{saved[6], saved[7], ctx->saved_data["total_chunks"].toInt()};
    kernels::ChunkDeltaParams p =
        MakeParams(q, k, v, beta, g, h0, seqs, ctx->saved_data["scale"].toDouble());
    p.chunk_states = saved[8].data_ptr();
    const torch::Tensor dbeta = torch::empty_like(beta);
    const torch::Tensor dg = g.defined() ? torch::empty_like(g) : torch::Tensor();
    p.dbeta = Fp32Ptr(dbeta);
    p.da = Fp32Ptr(dg);  // da is dg: params.a is g itself (no gate_in_kernel)
    const ChunkGrads d =
        RunChunkBackward(g.defined() ? kGatedDeltaRule : kDeltaRule, grads, q, k, v, h0, &p);
    // One gradient per forward argument; cu_seqlens, chunk offsets and the scalars have none.
    return {d.dq, d.dk, d.dv, dbeta, dg, d.dh0, {}, {}, {}, {}, {}};
  }
};

// Converts to the kernels' types (differentiably), runs the Function, converts back. g undefined:
// the ungated rule.
DeltaRuleOutput Run(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& g, const torch::Tensor& beta, double scale,
                    const torch::Tensor& initial_state, bool output_final_state,
                    const torch::Tensor& cu_seqlens) {
  const ChunkSeqlens seqs = DeviceChunkSeqlens(cu_seqlens, q.device());
  const variable_list out = DeltaRuleChunkFunction::apply(
      Bf16(q), Bf16(k), Bf16(v), Fp32(beta), Optional(Fp32(g)), Optional(Fp32(initial_state)),
      Optional(seqs.cu_seqlens), Optional(seqs.chunk_offsets), seqs.total_chunks, scale,
      output_final_state);
  DeltaRuleOutput result;
  result.output = out[0].to(v.scalar_type());
  if (output_final_state) result.final_state = out[1];
  return result;
}

}  // namespace

std::optional<DeltaRuleOutput> ChunkDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                              const torch::Tensor& v, const torch::Tensor& beta,
                                              double scale, const torch::Tensor& initial_state,
                                              bool output_final_state,
                                              const torch::Tensor& cu_seqlens) {
  internal::CheckDeltaRuleArguments("delta rule", q, k, v, {}, beta, initial_state, cu_seqlens);
  CheckDevice("ChunkDeltaRule", q.device(), {k, v, beta, initial_state});
  if (const auto why = UnsupportedChunkShapes(q, v, kernels::kDeltaMaxKDim)) {
    TORCH_WARN_ONCE("ChunkDeltaRule runs the ATen reference on the GPU for ", *why);
    return std::nullopt;
  }
  return Run(q, k, v, {}, beta, scale, initial_state, output_final_state, cu_seqlens);
}

std::optional<DeltaRuleOutput> ChunkGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                                   const torch::Tensor& v, const torch::Tensor& g,
                                                   const torch::Tensor& beta, double scale,
                                                   const torch::Tensor& initial_state,
                                                   bool output_final_state,
                                                   const torch::Tensor& cu_seqlens) {
  internal::CheckDeltaRuleArguments("gated delta rule", q, k, v, g, beta, initial_state,
                                    cu_seqlens);
  CheckDevice("ChunkGatedDeltaRule", q.device(), {k, v, g, beta, initial_state});
  if (const auto why = UnsupportedChunkShapes(q, v, kernels::kDeltaMaxKDim)) {
    TORCH_WARN_ONCE("ChunkGatedDeltaRule runs the ATen reference on the GPU for ", *why);
    return std::nullopt;
  }
  return Run(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens);
}

}  // namespace flame::worker::ops::cuda
