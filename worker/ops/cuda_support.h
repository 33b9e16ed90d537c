// Helpers shared by the ops' CUDA translation units (gated_chunk_cuda.cc, delta_rule_cuda.cc,
// layer_ops_cuda.cc): tensors in the layouts the launchers of kernels/ take, their raw pointers,
// scratch from the caching allocator, launcher errors turned into c10::Error, and what the chunk
// kernels' autograd Functions share whatever the family: varlen bounds, the common params fields,
// the forward's outputs and the backward's common gradients. FLAME_CUDA builds only.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <torch/types.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/chunk_gated_params.h"

namespace flame::worker::ops::cuda {

// The launchers' pointer contract (kernels/*/…h): 16-byte aligned rows.
inline bool Aligned16(const torch::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// `x` as a contiguous, 16-byte aligned tensor of `type` (a copy only when it is not one already);
// undefined stays undefined. Made of differentiable ops (to, contiguous, clone): the entry points
// convert their arguments with it, so autograd casts the gradients back to the caller's dtypes,
// and the autograd Functions use it on incoming gradients.
inline torch::Tensor Dense(const torch::Tensor& x, torch::ScalarType type) {
  if (!x.defined()) return x;
  torch::Tensor out = x.to(type).contiguous();
  return Aligned16(out) ? out : out.clone();  // clone: a fresh, aligned allocation
}
inline torch::Tensor Bf16(const torch::Tensor& x) { return Dense(x, torch::kBFloat16); }
inline torch::Tensor Fp32(const torch::Tensor& x) { return Dense(x, torch::kFloat); }

inline __nv_bfloat16* Bf16Ptr(const torch::Tensor& t) {
  return t.defined() ? reinterpret_cast<__nv_bfloat16*>(t.data_ptr<at::BFloat16>()) : nullptr;
}
inline float* Fp32Ptr(const torch::Tensor& t) {
  return t.defined() ? t.data_ptr<float>() : nullptr;
}

// Scratch of `bytes` on `device` from the caching allocator, freed (back to the cache) when the
// tensor goes; 256-byte aligned as the launchers ask.
inline torch::Tensor Workspace(size_t bytes, const torch::Device& device) {
  return torch::empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)},
                      torch::TensorOptions().dtype(torch::kByte).device(device));
}

// Throws when a launcher refused its arguments or a launch failed.
inline void Check(cudaError_t err, const char* launcher) {
  TORCH_CHECK(err == cudaSuccess, launcher, " failed: ", cudaGetErrorString(err));
}

// Every defined tensor on `device` (a CPU tensor mixed with CUDA ones is a caller's bug).
inline void CheckDevice(const char* op, const torch::Device& device,
                        std::initializer_list<torch::Tensor> tensors) {
  for (const torch::Tensor& t : tensors) {
    TORCH_CHECK(!t.defined() || t.device() == device, op, ": all tensors must be on ", device,
                ", got one on ", t.device());
  }
}

// cu_seqlens (int64 or int32, any device) as device int32 [N + 1].
inline torch::Tensor DeviceSeqlens(const torch::Tensor& cu_seqlens, const torch::Device& device) {
  if (!cu_seqlens.defined()) return {};
  return Dense(cu_seqlens.to(device), torch::kInt);
}

// cu_seqlens as the chunk launchers take it (kernels::ChunkGatedParams, ChunkDeltaParams): device
// int32 [N + 1] with its chunk offsets, the prefix sums of ceil(length / 64) that
// kernels::ChunkOffsets computes on the host. All empty without cu_seqlens.
struct ChunkSeqlens {
  torch::Tensor cu_seqlens;     // int32 [N + 1]
  torch::Tensor chunk_offsets;  // int32 [N + 1]
  int64_t total_chunks = 0;     // chunk_offsets[N]
};

inline ChunkSeqlens DeviceChunkSeqlens(const torch::Tensor& cu_seqlens,
                                       const torch::Device& device) {
  if (!cu_seqlens.defined()) return {};
  const torch::Tensor host = cu_seqlens.to(torch::kCPU, torch::kInt).contiguous();
  const std::vector<int32_t> bounds(host.data_ptr<int32_t>(),
                                    host.data_ptr<int32_t>() + host.numel());
  const std::vector<int32_t> offsets = kernels::ChunkOffsets(bounds);
  return {DeviceSeqlens(host, device), DeviceSeqlens(torch::tensor(offsets, torch::kInt), device),
          offsets.back()};
}

// Why a chunk kernel (bf16 compute; K and V tiled by 64, K at most `max_k`) cannot take q
// [B,T,H,K] and v [B,T,H,V], or nullopt when it can.
inline std::optional<std::string> UnsupportedChunkShapes(const torch::Tensor& q,
                                                         const torch::Tensor& v, int64_t max_k) {
  if (q.scalar_type() == torch::kDouble) return "float64 inputs (the kernels compute in bf16)";
  const int64_t K = q.size(3), V = v.size(3);
  if (K % 64 != 0 || V % 64 != 0 || K > max_k) {
    return "K = " + std::to_string(K) + ", V = " + std::to_string(V) +
           " (the kernels take K a multiple of 64 up to " + std::to_string(max_k) +
           " and V a multiple of 64)";
  }
  if (q.numel() == 0 || v.numel() == 0) return "an empty batch";
  return std::nullopt;
}

// Optional inputs of an autograd Function: torch 2.11 rejects an undefined at::Tensor among the
// inputs ("tensor does not have a device"), but takes an empty std::optional<at::Tensor>.
using OptionalTensor = std::optional<torch::Tensor>;
inline OptionalTensor Optional(const torch::Tensor& t) {
  return t.defined() ? OptionalTensor(t) : std::nullopt;
}
inline torch::Tensor Value(const OptionalTensor& t) { return t.value_or(torch::Tensor()); }

inline int32_t* IntPtr(const torch::Tensor& t) {
  return t.defined() ? t.data_ptr<int32_t>() : nullptr;
}

// The fields that the chunk launchers' params (kernels::ChunkGatedParams, ChunkDeltaParams)
// share: sizes, varlen bounds, q, k, v with contiguous strides, and the initial state. From
// tensors already in the kernels' types: bf16 q, k [B,T,H,K] and v [B,T,H,V]; fp32 h0 [N,H,K,V]
// or undefined.
template <typename Params>
void SetChunkInputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& h0, const ChunkSeqlens& seqs, double scale, Params* p) {
  const int T = static_cast<int>(q.size(1)), H = static_cast<int>(q.size(2));
  const int K = static_cast<int>(q.size(3)), V = static_cast<int>(v.size(3));
  p->batch = static_cast<int>(q.size(0));
  p->seq_len = T;
  p->heads = H;
  p->k_dim = K;
  p->v_dim = V;
  p->scale = static_cast<float>(scale);
  if (seqs.cu_seqlens.defined()) {
    p->num_seqs = static_cast<int>(seqs.cu_seqlens.size(0) - 1);
    p->cu_seqlens = IntPtr(seqs.cu_seqlens);
    p->chunk_offsets = IntPtr(seqs.chunk_offsets);
    p->total_chunks = static_cast<int>(seqs.total_chunks);
  }
  p->q = Bf16Ptr(q);
  p->k = Bf16Ptr(k);
  p->v = Bf16Ptr(v);
  p->qk_strides = kernels::ContiguousStrides(T, H, K);
  p->v_strides = kernels::ContiguousStrides(T, H, V);
  p->initial_state = Fp32Ptr(h0);
}

// The launchers of one chunk-kernel family (kernels/gla, simple_gla, delta_rule,
// gated_delta_rule) over its params struct; `name` prefixes "Forward"/"Backward" in errors.
template <typename Params>
struct ChunkLaunchers {
  const char* name;
  size_t (*workspace_bytes)(const Params&, bool backward);
  cudaError_t (*forward)(const Params&, cudaStream_t);
  cudaError_t (*backward)(const Params&, cudaStream_t);
};

// Runs the family's forward or backward on the current stream, with its scratch from the caching
// allocator. The scratch goes back to the cache on return, which is safe: the allocator hands it
// out again only behind the work already queued on this stream.
template <typename Params>
void LaunchChunk(const ChunkLaunchers<Params>& family, bool backward, const torch::Device& device,
                 Params* p) {
  const torch::Tensor workspace = Workspace(family.workspace_bytes(*p, backward), device);
  p->workspace = workspace.data_ptr();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cudaError_t err = backward ? family.backward(*p, stream) : family.forward(*p, stream);
  TORCH_CHECK(err == cudaSuccess, family.name, backward ? "Backward" : "Forward",
              " failed: ", cudaGetErrorString(err));
}

// The forward of a chunk Function, once `p` holds its inputs: allocates o (bf16, like v) and the
// final state (fp32 [N,H,K,V] when requested, else an empty [0] that the entry point drops), and
// runs the family's forward. Returns {o, final_state}.
template <typename Params>
std::vector<torch::Tensor> RunChunkForward(const ChunkLaunchers<Params>& family,
                                           const torch::Tensor& q, const torch::Tensor& v,
                                           const ChunkSeqlens& seqs, bool output_final_state,
                                           Params* p) {
  const torch::TensorOptions fp32 = q.options().dtype(torch::kFloat);
  const int64_t N = seqs.cu_seqlens.defined() ? seqs.cu_seqlens.size(0) - 1 : q.size(0);
  const torch::Tensor o = torch::empty(v.sizes(), v.options());
  const torch::Tensor final_state = output_final_state
                                        ? torch::empty({N, q.size(2), q.size(3), v.size(3)}, fp32)
                                        : torch::empty({0}, fp32);
  p->o = Bf16Ptr(o);
  p->final_state = output_final_state ? Fp32Ptr(final_state) : nullptr;
  LaunchChunk(family, /*backward=*/false, q.device(), p);
  return {o, final_state};
}

// The gradients every chunk family writes.
struct ChunkGrads {
  torch::Tensor dq, dk, dv;  // bf16, like q, k, v
  torch::Tensor dh0;         // fp32 [N,H,K,V], undefined without an initial state
};

// The backward of a chunk Function, once `p` holds its inputs and the family's own gradient
// outputs (gates, beta): takes `grads`, the gradients of {o, final_state}, allocates dq, dk, dv
// and dh0, and runs the family's backward (which recomputes what the forward did not keep).
template <typename Params>
ChunkGrads RunChunkBackward(const ChunkLaunchers<Params>& family,
                            const std::vector<torch::Tensor>& grads, const torch::Tensor& q,
                            const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& h0,
                            Params* p) {
  // An output nobody used has an undefined gradient: zeros for o, "none" for the final state.
  const torch::Tensor d_o = grads[0].defined() ? Bf16(grads[0]) : torch::zeros_like(v);
  const torch::Tensor d_final =
      grads[1].defined() && grads[1].numel() > 0 ? Fp32(grads[1]) : torch::Tensor();
  ChunkGrads d{torch::empty_like(q), torch::empty_like(k), torch::empty_like(v),
               h0.defined() ? torch::empty_like(h0) : torch::Tensor()};
  p->d_o = Bf16Ptr(d_o);
  p->d_final_state = Fp32Ptr(d_final);
  p->dq = Bf16Ptr(d.dq);
  p->dk = Bf16Ptr(d.dk);
  p->dv = Bf16Ptr(d.dv);
  p->d_initial_state = Fp32Ptr(d.dh0);
  LaunchChunk(family, /*backward=*/true, q.device(), p);
  return d;
}

}  // namespace flame::worker::ops::cuda
