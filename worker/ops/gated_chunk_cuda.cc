// CUDA paths of ChunkGla and ChunkSimpleGla: one torch::autograd::Function around the gated chunk
// launchers of kernels/gla and kernels/simple_gla (FLAME_CUDA builds only).
//
// The Function works on the kernels' types: bf16 q, k, v, fp32 gates and states, int32
// cu_seqlens with chunk offsets. The entry points convert into them with differentiable ATen ops
// (`to`, `contiguous`), so autograd casts the gradients back to whatever the caller passed.
// The forward keeps no per-chunk states: the backward recomputes them (the launchers' contract),
// so the saved tensors are just the inputs.
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

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
                                     const torch::Tensor& cu_seqlens,
                                     const torch::Tensor& chunk_offsets, int64_t total_chunks,
                                     double scale, bool channel_gate) {
  const int T = static_cast<int>(q.size(1)), H = static_cast<int>(q.size(2));
  const int K = static_cast<int>(q.size(3)), V = static_cast<int>(v.size(3));
  kernels::ChunkGatedParams p;
  p.batch = static_cast<int>(q.size(0));
  p.seq_len = T;
  p.heads = H;
  p.k_dim = K;
  p.v_dim = V;
  p.scale = static_cast<float>(scale);
  if (cu_seqlens.defined()) {
    p.num_seqs = static_cast<int>(cu_seqlens.size(0) - 1);
    p.cu_seqlens = IntPtr(cu_seqlens);
    p.chunk_offsets = IntPtr(chunk_offsets);
    p.total_chunks = static_cast<int>(total_chunks);
  }
  p.q = Bf16Ptr(q);
  p.k = Bf16Ptr(k);
  p.v = Bf16Ptr(v);
  p.qk_strides = kernels::ContiguousStrides(T, H, K);
  p.v_strides = kernels::ContiguousStrides(T, H, V);
  p.g = Fp32Ptr(g);
  p.g_strides = kernels::ContiguousStrides(T, H, channel_gate ? K : 1);
  p.g_gamma = Fp32Ptr(g_gamma);
  p.initial_state = Fp32Ptr(h0);
  return p;
}

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
    const torch::Tensor cu_seqlens = Value(cu_seqlens_in), chunk_offsets = Value(chunk_offsets_in);
    const c10::cuda::CUDAGuard guard(q.device());
    kernels::ChunkGatedParams p = MakeParams(q, k, v, g, g_gamma, h0, cu_seqlens, chunk_offsets,
                                             total_chunks, scale, channel_gate);
    const int64_t N = cu_seqlens.defined() ? cu_seqlens.size(0) - 1 : q.size(0);
    const torch::Tensor o = torch::empty(v.sizes(), v.options());
    const torch::Tensor final_state =
        output_final_state
            ? torch::empty({N, q.size(2), q.size(3), v.size(3)}, q.options().dtype(torch::kFloat))
            : torch::empty({0}, q.options().dtype(torch::kFloat));
    p.o = Bf16Ptr(o);
    p.final_state = output_final_state ? Fp32Ptr(final_state) : nullptr;
    const size_t bytes = channel_gate ? kernels::GlaChunkWorkspaceBytes(p, false)
                                      : kernels::SimpleGlaChunkWorkspaceBytes(p, false);
    const torch::Tensor workspace = Workspace(bytes, q.device());
    p.workspace = workspace.data_ptr();
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    Check(channel_gate ? kernels::GlaChunkForward(p, stream)
                       : kernels::SimpleGlaChunkForward(p, stream),
          channel_gate ? "GlaChunkForward" : "SimpleGlaChunkForward");

    ctx->save_for_backward({q, k, v, g, g_gamma, h0, cu_seqlens, chunk_offsets});
    ctx->saved_data["total_chunks"] = total_chunks;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["channel_gate"] = channel_gate;
    if (!output_final_state) ctx->mark_non_differentiable({final_state});
    return {o, final_state};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &g = saved[3],
                        &g_gamma = saved[4], &h0 = saved[5];
    const bool channel_gate = ctx->saved_data["channel_gate"].toBool();
    const c10::cuda::CUDAGuard guard(q.device());
    kernels::ChunkGatedParams p = MakeParams(q, k, v, g, g_gamma, h0, saved[6], saved[7],
                                             ctx->saved_data["total_chunks"].toInt(),
                                             ctx->saved_data["scale"].toDouble(), channel_gate);
    // An output nobody used has an undefined gradient: zeros for o, "none" for the final state.
    const torch::Tensor d_o = grads[0].defined() ? Bf16(grads[0]) : torch::zeros_like(v);
    const torch::Tensor d_final =
        grads[1].defined() && grads[1].numel() > 0 ? Fp32(grads[1]) : torch::Tensor();
    const torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k),
                        dv = torch::empty_like(v);
    const torch::Tensor dg = g.defined() ? torch::empty_like(g) : torch::Tensor();
    const torch::Tensor dh0 = h0.defined() ? torch::empty_like(h0) : torch::Tensor();
    p.d_o = Bf16Ptr(d_o);
    p.d_final_state = Fp32Ptr(d_final);
    p.dq = Bf16Ptr(dq);
    p.dk = Bf16Ptr(dk);
    p.dv = Bf16Ptr(dv);
    p.dg = Fp32Ptr(dg);
    p.d_initial_state = Fp32Ptr(dh0);
    const size_t bytes = channel_gate ? kernels::GlaChunkWorkspaceBytes(p, true)
                                      : kernels::SimpleGlaChunkWorkspaceBytes(p, true);
    const torch::Tensor workspace = Workspace(bytes, q.device());
    p.workspace = workspace.data_ptr();
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    Check(channel_gate ? kernels::GlaChunkBackward(p, stream)
                       : kernels::SimpleGlaChunkBackward(p, stream),
          channel_gate ? "GlaChunkBackward" : "SimpleGlaChunkBackward");
    // One gradient per forward argument; g_gamma is a constant, the rest are not differentiable.
    return {dq, dk, dv, dg, {}, dh0, {}, {}, {}, {}, {}, {}};
  }
};

// Why the kernels cannot take these arguments, or nullopt when they can.
std::optional<std::string> Unsupported(const torch::Tensor& q, const torch::Tensor& v) {
  if (q.scalar_type() == torch::kDouble) return "float64 inputs (the kernels compute in bf16)";
  const int64_t K = q.size(3), V = v.size(3);
  if (K % 64 != 0 || V % 64 != 0 || K > kMaxKeyDim) {
    return "K = " + std::to_string(K) + ", V = " + std::to_string(V) +
           " (the kernels take K in {64, 128, 192, 256} and V a multiple of 64)";
  }
  if (q.numel() == 0 || v.numel() == 0) return "an empty batch";
  return std::nullopt;
}

// Converts to the kernels' types (differentiably), runs the Function, converts back.
GlaOutput Run(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
              const torch::Tensor& g, const torch::Tensor& g_gamma, double scale,
              const torch::Tensor& initial_state, bool output_final_state,
              const torch::Tensor& cu_seqlens, bool channel_gate) {
  auto dense = [](const torch::Tensor& x, torch::ScalarType type) {
    if (!x.defined()) return x;
    const torch::Tensor y = x.to(type).contiguous();
    return Aligned16(y) ? y : y.clone();  // clone: a fresh, aligned allocation
  };
  auto bf16 = [&](const torch::Tensor& x) { return dense(x, torch::kBFloat16); };
  auto fp32 = [&](const torch::Tensor& x) { return dense(x, torch::kFloat); };
  torch::Tensor seqlens, offsets;
  int64_t total_chunks = 0;
  if (cu_seqlens.defined()) {
    const torch::Tensor host = cu_seqlens.to(torch::kCPU, torch::kInt).contiguous();
    const std::vector<int32_t> bounds(host.data_ptr<int32_t>(),
                                      host.data_ptr<int32_t>() + host.numel());
    const std::vector<int32_t> chunk_offsets = kernels::ChunkOffsets(bounds);
    total_chunks = chunk_offsets.back();
    seqlens = DeviceSeqlens(host, q.device());
    offsets = DeviceSeqlens(torch::tensor(chunk_offsets, torch::kInt), q.device());
  }
  const variable_list out = GatedChunkFunction::apply(
      bf16(q), bf16(k), bf16(v), Optional(fp32(g)),
      Optional(fp32(g_gamma.defined() ? g_gamma.detach() : g_gamma)), Optional(fp32(initial_state)),
      Optional(seqlens), Optional(offsets), total_chunks, scale, channel_gate, output_final_state);
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
  if (const auto why = Unsupported(q, v)) {
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
  if (const auto why = Unsupported(q, v)) {
    TORCH_WARN_ONCE("ChunkSimpleGla runs the ATen reference on the GPU for ", *why);
    return std::nullopt;
  }
  return Run(q, k, v, g, g_gamma, scale, initial_state, output_final_state, cu_seqlens, false);
}

}  // namespace flame::worker::ops::cuda
