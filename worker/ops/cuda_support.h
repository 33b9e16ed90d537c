// Helpers shared by the ops' CUDA translation units (gated_chunk_cuda.cc, layer_ops_cuda.cc):
// tensors in the layouts the launchers of kernels/ take, their raw pointers, scratch from the
// caching allocator, and launcher errors turned into c10::Error. FLAME_CUDA builds only.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <torch/types.h>

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace flame::worker::ops::cuda {

// The launchers' pointer contract (kernels/*/…h): 16-byte aligned rows.
inline bool Aligned16(const torch::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// `x` as a contiguous, 16-byte aligned tensor of `type` (a copy only when it is not one already).
// Not differentiable: the autograd Functions call it inside forward.
inline torch::Tensor Dense(const torch::Tensor& x, torch::ScalarType type) {
  torch::Tensor out = x.to(type).contiguous();
  return Aligned16(out) ? out : out.clone();
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

}  // namespace flame::worker::ops::cuda
