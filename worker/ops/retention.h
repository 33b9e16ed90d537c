// Retention (RetNet), fla's chunk_retention: simple GLA whose decay is a constant per head,
//
//   S_t = γ_h S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ (scale · q_t),   γ_h = 1 - 2^(-5-h)
//
// so head 0 forgets fastest (γ = 0.96875) and every further head halves the forgetting rate.
// Shapes are simple_gla.h's: q, k [B, T, H, K], v [B, T, H, V], states [N, H, K, V],
// cu_seqlens int64 [N + 1] (B == 1). It runs ChunkSimpleGla (chunks of 64; CUDA kernels on CUDA
// tensors, the ATen reference elsewhere).
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "worker/ops/gla.h"

namespace flame::worker::ops {

// log γ_h for h = 0..H-1, [H]: float32 like fla (float64 when `dtype` is float64).
torch::Tensor RetentionLogDecay(int64_t num_heads, torch::ScalarType dtype, torch::Device device);

GlaOutput ChunkRetention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         double scale, const torch::Tensor& initial_state = {},
                         bool output_final_state = false, const torch::Tensor& cu_seqlens = {});

}  // namespace flame::worker::ops
